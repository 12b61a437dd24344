"""The cases of the mail-text corpus, built from each client's own markup (see
``make_mail_text_corpus.py``), and the pure pipeline that reads them."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP

from gateway_bot.channels.email import mime
from gateway_bot.channels.email.agent_text import agent_text

ALICE = "alice@example.test"
BOT = "bot@example.test"
_ids = itertools.count(1)


def next_id() -> int:
    return next(_ids)


@dataclass(frozen=True)
class Case:
    name: str
    raw: bytes
    keep: tuple[str, ...]
    drop: tuple[str, ...] = ()


def expected_text(raw: bytes) -> str:
    """What the agent reads of ``raw`` as the first mail of its thread (its subject shown
    unless it is a reply's, which continues a known thread)."""
    message = mime.parse_bytes(raw)
    subject = str(message.get("Subject") or "")
    found = mime.contents(message)
    shown = None if mime.is_reply_subject(subject) else mime.base_subject(subject)
    return agent_text(found.body, shown if subject.strip() else None).text


# -- words --------------------------------------------------------------------------------

LANGS = ("en", "de", "fr", "it", "es")
NEW = {
    "en": "Please rebase the feature branch onto main and run the tests.",
    "de": "Bitte den Feature-Branch auf main rebasen und die Tests laufen lassen.",
    "fr": "Merci de rebaser la branche sur main et de lancer les tests.",
    "it": "Per favore fai il rebase del branch su main e lancia i test.",
    "es": "Por favor, haz rebase de la rama sobre main y ejecuta los tests.",
}
ANSWER1 = {
    "en": "Yes, fix them.",
    "de": "Ja, bitte beheben.",
    "fr": "Oui, corrige-les.",
    "it": "Sì, correggili.",
    "es": "Sí, corrígelos.",
}
ANSWER2 = {
    "en": "Use the release branch.",
    "de": "Nimm den Release-Branch.",
    "fr": "Utilise la branche release.",
    "it": "Usa il branch release.",
    "es": "Usa la rama release.",
}
Q1 = "Three tests failed in test_api.py. Shall I fix them?"
Q2 = "Which branch should I push to?"
REST = "OLDHISTORY the build log is attached above."
OLDER = "OLDERMAIL Could you look at the failing build?"
ATTR = {
    "en": "On Tue, 3 Mar 2026 at 10:00, Bot <bot@example.test> wrote:",
    "de": "Am Di., 3. März 2026 um 10:00 Uhr schrieb Bot <bot@example.test>:",
    "fr": "Le mar. 3 mars 2026 à 10:00, Bot <bot@example.test> a écrit :",
    "it": "Il giorno mar 3 mar 2026 alle ore 10:00 Bot <bot@example.test> ha scritto:",
    "es": "El mar, 3 mar 2026 a las 10:00, Bot (<bot@example.test>) escribió:",
}
HEADERS = {  # Outlook's header block: From, Sent, To, Subject
    "en": ("From", "Sent", "To", "Subject"),
    "de": ("Von", "Gesendet", "An", "Betreff"),
    "fr": ("De\u00a0", "Envoyé\u00a0", "À\u00a0", "Objet\u00a0"),
    "it": ("Da", "Inviato", "A", "Oggetto"),
    "es": ("De", "Enviado", "Para", "Asunto"),
}
SEPARATOR = {
    "en": "-----Original Message-----",
    "de": "-----Ursprüngliche Nachricht-----",
    "fr": "-----Message d'origine-----",
    "it": "-----Messaggio originale-----",
    "es": "-----Mensaje original-----",
}
FORWARD_GMAIL = {
    "en": "---------- Forwarded message ---------",
    "de": "---------- Weitergeleitete Nachricht ---------",
    "fr": "---------- Forwarded message ---------",
    "it": "---------- Forwarded message ---------",
    "es": "---------- Forwarded message ---------",
}
FORWARD_APPLE = {
    "en": "Begin forwarded message:",
    "de": "Anfang der weitergeleiteten Nachricht:",
    "fr": "Début du message réexpédié :",
    "it": "Inizio messaggio inoltrato:",
    "es": "Inicio del mensaje reenviado:",
}
FWD_SUBJECT = {"en": "Fwd:", "de": "WG:", "fr": "TR:", "it": "I:", "es": "RV:"}
FORWARDED = "FORWARDED The nightly job crashes with exit code 137 since Monday."
REQUEST = {
    "en": "Can you find out why this happens?",
    "de": "Kannst du herausfinden, warum das passiert?",
    "fr": "Peux-tu trouver pourquoi ça arrive ?",
    "it": "Puoi capire perché succede?",
    "es": "¿Puedes averiguar por qué pasa esto?",
}


# -- the mail around the text ---------------------------------------------------------------


def build(
    subject: str,
    *,
    html: str | None = None,
    plain: str | None = None,
    mailer: str = "",
    parts: list[EmailMessage] | None = None,
) -> bytes:
    number = next(_ids)
    message = EmailMessage()
    message["From"] = f"Alice <{ALICE}>"
    message["To"] = BOT
    message["Subject"] = subject
    message["Message-ID"] = f"<corpus-text-{number}@example.test>"
    message["Date"] = "Tue, 03 Mar 2026 10:05:00 +0000"
    if mailer:
        message["X-Mailer"] = mailer
    if parts is not None:
        message.make_mixed()
        for part in parts:
            message.attach(part)
    elif plain is not None and html is not None:
        message.set_content(plain)
        message.add_alternative(html, subtype="html")
    elif html is not None:
        message.set_content(html, subtype="html")
    else:
        message.set_content(plain or "")
    return fixed_boundaries(message, number).as_bytes(policy=SMTP)


def fixed_boundaries(message: EmailMessage, number: int) -> EmailMessage:
    """Boundaries from the case's number, not random: the corpus is the same on every run."""
    for depth, part in enumerate(message.walk()):
        if part.is_multipart():
            part.set_boundary(f"corpus-{number}-{depth}")
    return message


Maker = Callable[[str, str], Case]


def all_cases() -> list[Case]:
    from tests.corpus.mail_text_clients import (
        apple_mail,
        gmail,
        ios_mail,
        outlook_desktop,
        outlook_web,
        plain_client,
        thunderbird,
        yahoo,
    )
    from tests.corpus.mail_text_tricks import charset_cases, hidden_cases, split_cases

    cases: list[Case] = []
    for lang in LANGS:
        for shape in ("top", "inline", "bottom", "forward"):
            cases.append(gmail(shape, lang))
            cases.append(apple_mail(shape, lang))
            cases.append(thunderbird(shape, lang))
        for shape in ("top", "inline", "separator", "forward"):
            cases.append(outlook_desktop(shape, lang))
        for shape in ("top", "inline", "forward", "container"):
            cases.append(outlook_web(shape, lang))
        cases.append(outlook_web("top", lang, mobile=True))
        for shape in ("top", "inline"):
            cases.append(ios_mail(shape, lang))
            cases.append(yahoo(shape, lang))
        for client in ("mutt", "alpine", "thunderbird", "outlook", "yahoo", "apple"):
            cases.append(plain_client(client, "top", lang))
        for client in ("mutt", "alpine"):
            cases.append(plain_client(client, "inline", lang))
        cases.append(plain_client("mutt", "forward", lang))
    return [*cases, *hidden_cases(), *charset_cases(), *split_cases()]
