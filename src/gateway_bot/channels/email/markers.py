# ruff: noqa: RUF001 (fullwidth colons and Turkish letters are what the clients write)
"""The words mail clients write where the quoted history starts, in the languages they
ship: the separator line (``-----Original Message-----``, ``-----Ursprüngliche
Nachricht-----``, ``-----Message d'origine-----``), the header block that follows it or
stands alone (``From:/Sent:/To:/Subject:``, ``Von:/Gesendet:/An:/Betreff:``, ``De :/
Envoyé :/À :/Objet :``, ``Da:/Inviato:/A:/Oggetto:``...), and the forward markers
(``---------- Forwarded message ---------``, ``Begin forwarded message:``,
``Weitergeleitete Nachricht``). Collected from the clients' own output as seen in public
mail-parser test fixtures (see ``tests/corpus/mail_text/README.md``)."""

from __future__ import annotations

import re

_FROM = (
    "From|Von|De|Da|Van|Från|Fra|Od|От|Lähettäjä|Feladó|Kimden|Από|"
    "差出人|发件人|寄件者|寄件人|보낸 사람"
)
_SENT = (
    "Sent|Date|Gesendet|Datum|Envoyé|Enviado|Fecha|Data|Inviato|Verzonden|Skickat|Sendt|"
    "Dato|Wysłano|Odesláno|Отправлено|Дата|Lähetetty|Päivämäärä|Elküldve|Dátum|Gönderildi|"
    "Tarih|Στάλθηκε|Ημερομηνία|送信日時|日付|发送时间|日期|寄件日期|보낸 날짜"
)
_SUBJECT = (
    "Subject|Betreff|Objet|Asunto|Oggetto|Assunto|Onderwerp|Ämne|Emne|Temat|Předmět|Тема|"
    "Aihe|Tárgy|Konu|Θέμα|件名|主题|主旨|제목"
)
_LABEL_END = r"\s?[:：]"

FROM_LINE = re.compile(rf"^\s*\**\s*(?:{_FROM}){_LABEL_END}", re.IGNORECASE)
_SENT_LINE = re.compile(rf"(?:^|\n|\s)\**(?:{_SENT}){_LABEL_END}", re.IGNORECASE)
_SUBJECT_LINE = re.compile(rf"(?:^|\n|\s)\**(?:{_SUBJECT}){_LABEL_END}", re.IGNORECASE)

SEPARATOR = re.compile(
    r"^\s*-{2,}\s*(?:Original Message|Ursprüngliche Nachricht|Originalnachricht|"
    r"Message d'origine|Mensaje original|Messaggio originale|Mensagem original|"
    r"Oorspronkelijk bericht|Origineel bericht|Ursprungligt meddelande|"
    r"Opprinnelig melding|Oprindelig meddelelse|Alkuperäinen viesti|Původní zpráva|"
    r"Wiadomość oryginalna|Oryginalna wiadomość|Исходное сообщение|Eredeti üzenet|"
    r"Orijinal Mesaj|Αρχικό μήνυμα|原始邮件|原始郵件|元のメッセージ)\s*-{2,}\s*$",
    re.IGNORECASE | re.MULTILINE,
)

FORWARD = re.compile(
    r"(?:-{2,}\s*(?:Forwarded message|Forwarded Message|Weitergeleitete Nachricht|"
    r"Message transféré|Mensaje reenviado|Messaggio inoltrato|Mensagem encaminhada|"
    r"Doorgestuurd bericht|Vidarebefordrat meddelande|Videresendt meddelelse|"
    r"Videresendt melding|Välitetty viesti|Přeposlaná zpráva|Przekazana wiadomość|"
    r"Пересылаемое сообщение|Пересланное сообщение|Továbbított üzenet|"
    r"İletilen ileti|转发的邮件|転送されたメッセージ)\s*-{2,})|"
    r"^\s*(?:Begin forwarded message|Anfang der weitergeleiteten Nachricht|"
    r"Début du message réexpédié|Début du message transféré|Inicio del mensaje reenviado|"
    r"Inizio messaggio inoltrato|Início da mensagem reencaminhada|"
    r"Begin doorgestuurd bericht|Vidarebefordrat mejl)\s*[:：]",
    re.IGNORECASE | re.MULTILINE,
)

FORWARD_SUBJECT = re.compile(
    r"^\s*(?:\[[^\]]{0,40}\]\s*)?(?:fwd?|fw|wg|tr|rv|enc|i|doorst|vb|vl|pd|ilt)\s*:",
    re.IGNORECASE,
)
"""Fwd:/FW: and their translations (WG: German, TR: French, RV: Spanish, ENC: Portuguese,
I: Italian, Doorst: Dutch, VB: Swedish, VL: Finnish, PD: Polish; not VS:, a reply in
Finnish and a forward in Danish): Outlook's forward and
reply look alike in HTML, only the subject tells them apart. Only as the first prefix:
``Re: Fwd:`` answers a forward, and its quote is history."""


def is_header_block(text: str) -> bool:
    """``text`` opens with a From label and has Sent/Date and Subject labels: the header
    Outlook and most clients put over the mail they quote or forward."""
    head = text[:800]
    return bool(FROM_LINE.match(head) and _SENT_LINE.search(head) and _SUBJECT_LINE.search(head))


def is_forward_subject(subject: str) -> bool:
    return bool(FORWARD_SUBJECT.match(subject))


ATTRIBUTION = re.compile(
    r"(?:wrote|schrieb|a écrit|escribió|ha scritto|escreveu|schreef|skrev|napisał|"
    r"napsal|написал|написала|kirjoitti|írta|yazdı|έγραψε|写道|のメッセージ)\s*[:：]?\s*$",
    re.IGNORECASE,
)
"""The end of an "On <date>, <name> wrote:" line, in the clients' languages."""
