# ruff: noqa: E501 (client markup reads best unbroken)
"""The corpus mails of each client, built from its own markup (sources in
``mail_text/README.md``)."""

from __future__ import annotations

from tests.corpus.mail_text_cases import (
    ALICE,
    ANSWER1,
    ANSWER2,
    ATTR,
    BOT,
    FORWARD_APPLE,
    FORWARD_GMAIL,
    FORWARDED,
    FWD_SUBJECT,
    HEADERS,
    NEW,
    OLDER,
    Q1,
    Q2,
    REQUEST,
    REST,
    SEPARATOR,
    Case,
    build,
)


def _p(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _reply_words(lang: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return (NEW[lang],), (REST, OLDER, "OLDHISTORY")


# Gmail: div.gmail_quote(_container) > div.gmail_attr + blockquote.gmail_quote; inline
# answers beside the blockquote inside the container; forwards in a gmail_quote with the
# "Forwarded message" attribution and no blockquote.
_GQ = 'class="gmail_quote" style="margin:0px 0px 0px 0.8ex;border-left:1px solid rgb(204,204,204);padding-left:1ex"'


def gmail(shape: str, lang: str) -> Case:
    attr = f'<div dir="ltr" class="gmail_attr">{_p(ATTR[lang])}<br></div>'
    old = f'<div dir="ltr">{Q1}<br>{REST}</div>'
    plain = f"{NEW[lang]}\n\n{ATTR[lang]}\n> {Q1}\n> {REST}\n"
    if shape == "top":
        html = (
            f'<div dir="ltr">{_p(NEW[lang])}</div><br>'
            f'<div class="gmail_quote gmail_quote_container">{attr}'
            f"<blockquote {_GQ}>{old}</blockquote></div>"
        )
        keep, drop = _reply_words(lang)
    elif shape == "inline":
        html = (
            f'<div dir="ltr">{_p(NEW[lang])}</div><br>'
            f'<div class="gmail_quote gmail_quote_container">{attr}'
            f"<blockquote {_GQ}>{Q1}</blockquote><div>{_p(ANSWER1[lang])}</div>"
            f"<blockquote {_GQ}>{Q2}</blockquote><div>{_p(ANSWER2[lang])}</div>"
            f"<blockquote {_GQ}>{REST}</blockquote></div>"
        )
        keep, drop = (NEW[lang], Q1, ANSWER1[lang], Q2, ANSWER2[lang]), (REST,)
    elif shape == "bottom":
        html = (
            f'<div class="gmail_quote">{attr}<blockquote {_GQ}>{Q2}</blockquote></div>'
            f'<div dir="ltr">{_p(ANSWER2[lang])}</div>'
        )
        keep, drop = (Q2, ANSWER2[lang]), ()
    else:
        html = (
            f'<div dir="ltr">{_p(REQUEST[lang])}<br><br>'
            f'<div class="gmail_quote gmail_quote_container"><div dir="ltr" class="gmail_attr">'
            f'{FORWARD_GMAIL[lang]}<br>From: <strong class="gmail_sendername" dir="auto">'
            f'Carol</strong> <span dir="auto">&lt;carol@example.test&gt;</span><br>'
            f"Date: Mon, 2 Mar 2026 at 08:00<br>Subject: Nightly job<br>To: &lt;{ALICE}&gt;"
            f'<br></div><br><br><div dir="ltr">{FORWARDED}</div></div></div>'
        )
        return Case(
            f"gmail-forward-{lang}",
            build("Fwd: Nightly job", html=html, plain=plain),
            (REQUEST[lang], FORWARDED, "Carol"),
        )
    return Case(f"gmail-{shape}-{lang}", build("Re: Build", html=html, plain=plain), keep, drop)


def _outlook_header(lang: str, style: str) -> str:
    frm, sent, to, subject = HEADERS[lang]
    return (
        f'<div style="{style}"><p class="MsoNormal"><b><span lang="EN-US">{frm}:</span></b>'
        f'<span lang="EN-US"> Bot &lt;{BOT}&gt; <br><b>{sent}:</b> Tuesday, March 3, 2026 '
        f"10:00 AM<br><b>{to}:</b> Alice &lt;{ALICE}&gt;<br><b>{subject}:</b> Build"
        "</span></p></div>"
    )


_WORD_HEAD = (
    '<html xmlns:o="urn:schemas-microsoft-com:office:office"><head><meta name="Generator" '
    'content="Microsoft Word 15 (filtered medium)"><style><!-- p.MsoNormal {margin:0cm;'
    'font-size:11.0pt;font-family:"Calibri",sans-serif;} a:link, span.MsoHyperlink '
    "{color:#0563C1;text-decoration:underline;} span.EmailStyle17 {mso-style-type:"
    'personal-reply;color:#1F497D;} --></style></head><body lang="EN-US" link="#0563C1">'
    '<div class="WordSection1">'
)


def outlook_desktop(shape: str, lang: str) -> Case:
    """Outlook for Windows: Word HTML, no divRplyFwdMsg; the header block under a
    Word-style top border (newer), or after a separator line with no border (older)."""
    border = "border:none;border-top:solid #E1E1E1 1.0pt;padding:3.0pt 0cm 0cm 0cm"
    head = _outlook_header(lang, border)
    if shape == "separator":
        frm, sent, to, subject = HEADERS[lang]
        head = (
            f'<div><p class="MsoNormal">{SEPARATOR[lang]}<br>{frm}: Bot [mailto:{BOT}]<br>'
            f"{sent}: Tuesday, March 3, 2026 10:00<br>{to}: Alice<br>{subject}: Build</p></div>"
        )
    old = f'<p class="MsoNormal">{Q1}<o:p></o:p></p><p class="MsoNormal">{REST}<o:p></o:p></p>'
    top = f'<p class="MsoNormal"><span style="color:#1F497D">{_p(NEW[lang])}<o:p></o:p></span></p>'
    if shape == "inline":
        answer = '<p class="MsoNormal"><b><i><span style="color:#C00000">{}</span></i></b></p>'
        old = (
            f'<p class="MsoNormal">{Q1}</p>{answer.format(_p(ANSWER1[lang]))}'
            f'<p class="MsoNormal">{Q2}</p>{answer.format(_p(ANSWER2[lang]))}'
            f'<p class="MsoNormal">{REST}</p>'
        )
        keep, drop = (NEW[lang], ANSWER1[lang], ANSWER2[lang], Q1, Q2), (REST,)
    else:
        keep, drop = _reply_words(lang)
    subject = "RE: Build" if lang == "en" else "AW: Build" if lang == "de" else "RE: Build"
    if shape == "forward":
        top = f'<p class="MsoNormal">{_p(REQUEST[lang])}</p>'
        old = f'<p class="MsoNormal">{FORWARDED}</p>'
        subject = f"{FWD_SUBJECT[lang]} Nightly job" if lang != "en" else "FW: Nightly job"
        keep, drop = (REQUEST[lang], FORWARDED), ()
    html = f'{_WORD_HEAD}{top}<p class="MsoNormal">&nbsp;</p><div>{head}</div>{old}</div></body></html>'
    plain = f"{NEW[lang]}\n\n{SEPARATOR[lang]}\nFrom: Bot\n\n{Q1}\n"
    return Case(
        f"outlook-desktop-{shape}-{lang}",
        build(subject, html=html, plain=plain, mailer="Microsoft Outlook 16.0"),
        keep,
        drop,
    )


def _owa_header(lang: str) -> str:
    frm, sent, to, subject = HEADERS[lang]
    return (
        '<div id="appendonsend"></div><hr style="display:inline-block;width:98%" tabindex="-1">'
        '<div id="divRplyFwdMsg" dir="ltr"><font face="Calibri, sans-serif" style="font-size:11pt"'
        f' color="#000000"><b>{frm}:</b> Bot &lt;{BOT}&gt;<br><b>{sent}:</b> Tuesday, March 3, '
        f"2026 10:00<br><b>{to}:</b> Alice &lt;{ALICE}&gt;<br><b>{subject}:</b> Build</font>"
        "<div>&nbsp;</div></div>"
    )


def outlook_web(shape: str, lang: str, mobile: bool = False) -> Case:
    """Outlook on the web / new Outlook (divRplyFwdMsg after an hr), and Outlook for iOS
    and Android (the same, under "Get Outlook for iOS")."""
    div = '<div class="elementToProof" style="font-family:Aptos,sans-serif;font-size:12pt;color:rgb(0,0,0)">{}</div>'
    top = div.format(_p(NEW[lang]))
    if mobile:
        top = (
            f'<div dir="ltr">{_p(NEW[lang])}</div><div dir="ltr"><br></div>'
            '<div id="ms-outlook-mobile-signature" dir="ltr">Get <a href="https://aka.ms/o0ukef">'
            "Outlook for iOS</a></div>"
        )
    old = f'<div style="font-size:11pt">{Q1}</div><div>{REST}</div>'
    keep, drop = _reply_words(lang)
    subject = "RE: Build"
    if shape == "inline":
        answer = '<div style="color:rgb(192,0,0)"><b>{}</b></div>'
        old = (
            f"<div>{Q1}</div>{answer.format(_p(ANSWER1[lang]))}<div>{Q2}</div>"
            f"{answer.format(_p(ANSWER2[lang]))}<div>{REST}</div>"
        )
        keep, drop = (NEW[lang], ANSWER1[lang], ANSWER2[lang], Q1, Q2), (REST,)
    if shape == "forward":
        top = div.format(_p(REQUEST[lang]))
        old = f"<div>{FORWARDED}</div>"
        subject = f"{FWD_SUBJECT[lang]} Nightly job" if lang != "en" else "FW: Nightly job"
        keep, drop = (REQUEST[lang], FORWARDED), ()
    container = shape == "container"
    history = (
        f'<div id="mail-editor-reference-message-container"><div class="ms-outlook-mobile-reference-message">'
        f"{_owa_header(lang).split('<hr', 1)[0]}<div>{Q1}</div><div>{REST}</div></div></div>"
        if container
        else f'{_owa_header(lang)}<div dir="ltr">{old}</div>'
    )
    html = f'<html><head></head><body><div dir="ltr">{top}<br>{history}</div></body></html>'
    name = "outlook-mobile" if mobile else "outlook-web"
    return Case(f"{name}-{shape}-{lang}", build(subject, html=html, plain=NEW[lang]), keep, drop)


def apple_mail(shape: str, lang: str) -> Case:
    """Apple Mail (macOS): blockquote type=cite with the "On ... wrote:" line inside,
    inline answers between blockquotes, forwards as "Begin forwarded message:"."""
    body = '<body style="overflow-wrap: break-word; -webkit-nbsp-mode: space; line-break: after-white-space;">'
    cite = '<blockquote type="cite">{}</blockquote>'
    attr = f'<div>{_p(ATTR[lang])}</div><br class="Apple-interchange-newline">'
    if shape == "top":
        inner = (
            f'{_p(NEW[lang])}<br id="lineBreakAtBeginningOfMessage"><div><br>'
            + cite.format(f"{attr}<div><div>{Q1}</div><div>{REST}</div></div>")
            + "</div><br>"
        )
        keep, drop = _reply_words(lang)
    elif shape == "inline":
        inner = (
            f"<div>{_p(NEW[lang])}</div><div><br>"
            + cite.format(f"{attr}<div>{Q1}</div>")
            + f"<div>{_p(ANSWER1[lang])}</div><br>"
            + cite.format(f"<div>{Q2}</div>")
            + f"<div>{_p(ANSWER2[lang])}</div><br>"
            + cite.format(f"<div>{REST}</div><div>{OLDER}</div>")
            + "</div>"
        )
        keep, drop = (NEW[lang], Q1, ANSWER1[lang], Q2, ANSWER2[lang]), (REST, OLDER)
    elif shape == "bottom":
        inner = (
            "<div><br>"
            + cite.format(f"{attr}<div>{Q2}</div>")
            + f"</div><div>{_p(ANSWER2[lang])}</div>"
        )
        keep, drop = (Q2, ANSWER2[lang]), ()
    else:
        header = (
            '<div style="margin-top: 0px; margin-right: 0px; margin-bottom: 0px; margin-left: 0px;">'
            '<span style="font-family: -webkit-system-font, Helvetica Neue, Helvetica, sans-serif; '
            'color:rgba(0, 0, 0, 1.0);"><b>From: </b></span><span style="font-family: '
            '-webkit-system-font, Helvetica Neue, Helvetica, sans-serif;">Carol &lt;carol@example.test&gt;'
            "<br></span></div>"
        )
        inner = (
            f"{_p(REQUEST[lang])}<br><div><br>"
            + cite.format(
                f'<div>{_p(FORWARD_APPLE[lang])}</div><br class="Apple-interchange-newline">'
                f"{header}<br><div><div>{FORWARDED}</div></div>"
            )
            + "</div>"
        )
        html = f'<html><head><meta http-equiv="content-type" content="text/html; charset=utf-8"></head>{body}{inner}</body></html>'
        return Case(
            f"apple-mail-forward-{lang}",
            build(
                "Fwd: Nightly job",
                html=html,
                plain=REQUEST[lang],
                mailer="Apple Mail (2.3826.400.131.1.6)",
            ),
            (REQUEST[lang], FORWARDED, "Carol"),
        )
    html = f'<html><head><meta http-equiv="content-type" content="text/html; charset=utf-8"></head>{body}{inner}</body></html>'
    return Case(
        f"apple-mail-{shape}-{lang}", build("Re: Build", html=html, plain=NEW[lang]), keep, drop
    )


def ios_mail(shape: str, lang: str) -> Case:
    """iOS Mail: the attribution in a blockquote of its own, then the quoted mail's; "Sent
    from my iPhone" under the new text."""
    top = f'<div dir="ltr">{_p(NEW[lang])}</div><div dir="ltr"><br><div dir="ltr">Sent from my iPhone</div></div>'
    history = (
        f'<div dir="ltr"><br><blockquote type="cite">{_p(ATTR[lang])}<br><br></blockquote></div>'
        f'<blockquote type="cite"><div dir="ltr">{Q1}<br>{REST}</div></blockquote>'
    )
    keep, drop = (NEW[lang], "Sent from my iPhone"), (REST,)
    if shape == "inline":
        history = (
            f'<div dir="ltr"><br><blockquote type="cite">{_p(ATTR[lang])}<br><br></blockquote></div>'
            f'<blockquote type="cite"><div dir="ltr">{Q1}</div></blockquote>'
            f'<div dir="ltr">{_p(ANSWER1[lang])}</div>'
            f'<blockquote type="cite"><div dir="ltr">{REST}</div></blockquote>'
        )
        keep, drop = (NEW[lang], Q1, ANSWER1[lang]), (REST,)
    html = f'<html><head></head><body dir="auto">{top}{history}</body></html>'
    return Case(
        f"ios-mail-{shape}-{lang}", build("Re: Build", html=html, plain=NEW[lang]), keep, drop
    )


def thunderbird(shape: str, lang: str) -> Case:
    """Thunderbird: moz-cite-prefix before blockquote type=cite; forwards in a
    moz-forward-container."""
    prefix = f'<div class="moz-cite-prefix">{_p(ATTR[lang])}<br></div>'
    cite = '<blockquote type="cite" cite="mid:gwb.abcdef12.1@example.test">{}</blockquote>'
    if shape == "top":
        inner = f"<p>{_p(NEW[lang])}</p>{prefix}" + cite.format(f"<p>{Q1}</p><p>{REST}</p>")
        keep, drop = _reply_words(lang)
    elif shape == "inline":
        inner = (
            f"<p>{_p(NEW[lang])}</p>{prefix}"
            + cite.format(f"<p>{Q1}</p>")
            + f"<p>{_p(ANSWER1[lang])}</p>"
            + cite.format(f"<p>{Q2}</p>")
            + f"<p>{_p(ANSWER2[lang])}</p>"
            + cite.format(f"<p>{REST}</p>")
        )
        keep, drop = (NEW[lang], Q1, ANSWER1[lang], Q2, ANSWER2[lang]), (REST,)
    elif shape == "bottom":
        inner = prefix + cite.format(f"<p>{Q2}</p>") + f"<p>{_p(ANSWER2[lang])}</p>"
        keep, drop = (Q2, ANSWER2[lang]), ()
    else:
        inner = (
            f'<p>{_p(REQUEST[lang])}</p><div class="moz-forward-container"><br><br>'
            "-------- Forwarded Message --------<br>Subject: Nightly job<br>"
            "From: Carol &lt;carol@example.test&gt;<br><br>"
            f"<p>{FORWARDED}</p></div>"
        )
        html = f"<html><head></head><body>{inner}</body></html>"
        return Case(
            f"thunderbird-forward-{lang}",
            build("Fwd: Nightly job", html=html, plain=REQUEST[lang]),
            (REQUEST[lang], FORWARDED, "Carol"),
        )
    html = f'<html><head><meta http-equiv="Content-Type" content="text/html; charset=UTF-8"></head><body>{inner}</body></html>'
    return Case(
        f"thunderbird-{shape}-{lang}",
        build("Re: Build", html=html, plain=NEW[lang], mailer="Mozilla Thunderbird"),
        keep,
        drop,
    )


def yahoo(shape: str, lang: str) -> Case:
    """Yahoo Mail: the old mail in a ydp-prefixed yahoo_quoted div; inline answers typed
    into it in a colour."""
    style = 'style="font-family:Helvetica Neue, Helvetica, Arial, sans-serif;font-size:13px;color:#26282a;"'
    quoted = f"<div>{Q1}</div><div>{REST}</div>"
    keep, drop = _reply_words(lang)
    if shape == "inline":
        answer = '<div><span style="color:rgb(0, 112, 192)"><b>{}</b></span></div>'
        quoted = (
            f"<div>{Q1}</div>{answer.format(_p(ANSWER1[lang]))}<div>{Q2}</div>"
            f"{answer.format(_p(ANSWER2[lang]))}<div>{REST}</div>"
        )
        keep, drop = (NEW[lang], Q1, ANSWER1[lang], Q2, ANSWER2[lang]), (REST,)
    html = (
        '<html><head></head><body><div class="ydp3f1c6a0ayahoo-style-wrap" '
        f'style="font-family:Helvetica Neue, Helvetica, Arial, sans-serif;font-size:13px;"><div dir="ltr">{_p(NEW[lang])}</div></div>'
        f'<div id="ydpa1b2yahoo_quoted_1234" class="ydpa1b2yahoo_quoted"><div {style}>'
        f"<div>{_p(ATTR[lang])}</div><div><br></div><div><br></div>"
        f'<div><div id="ydpa1b2yiv0987">{quoted}</div></div></div></div></body></html>'
    )
    return Case(
        f"yahoo-{shape}-{lang}",
        build("Re: Build", html=html, plain=NEW[lang], mailer="WebService/1.1 YMailNorrin"),
        keep,
        drop,
    )


def plain_client(client: str, shape: str, lang: str) -> Case:
    """mutt, Alpine, Thunderbird plain, Outlook plain (separator and header block), Yahoo
    plain, Apple Mail plain ("> On ..., at ..., X wrote:" inside the quote)."""
    quoted = f"> {Q1}\n>\n> {REST}\n"
    if client == "mutt":
        attr = "On Tue, Mar 03, 2026 at 10:00:00AM +0000, Bot wrote:"
    elif client == "alpine":
        attr = "On Tue, 3 Mar 2026, Bot wrote:"
    else:
        attr = ATTR[lang]
    keep, drop = _reply_words(lang)
    if shape == "inline":
        text = f"{attr}\n> {Q1}\n\n{ANSWER1[lang]}\n\n> {Q2}\n\n{ANSWER2[lang]}\n\n> {REST}\n> {OLDER}\n"
        keep, drop = (Q1, ANSWER1[lang], Q2, ANSWER2[lang]), (REST, OLDER)
    elif client == "outlook":
        frm, sent, to, subject = HEADERS[lang]
        text = (
            f"{NEW[lang]}\n\n{SEPARATOR[lang]}\n{frm.strip()}: Bot [mailto:{BOT}]\n"
            f"{sent.strip()}: Tuesday, March 3, 2026 10:00\n{to.strip()}: Alice\n"
            f"{subject.strip()}: Build\n\n{Q1}\n{REST}\n"
        )
    elif client == "yahoo":
        text = (
            f"{NEW[lang]}\n\n\n----- Original Message -----\nFrom: Bot <{BOT}>\n"
            f"To: {ALICE}\nSent: Tuesday, March 3, 2026 10:00 AM\nSubject: Build\n\n{Q1}\n{REST}\n"
        )
    elif client == "apple":
        text = f"{NEW[lang]}\n> On 3 Mar 2026, at 10:00, Bot <{BOT}> wrote:\n>\n{quoted}"
    else:
        text = f"{NEW[lang]}\n\n{attr}\n{quoted}"
    if shape == "forward":
        text = (
            f"{REQUEST[lang]}\n\n{FORWARD_GMAIL[lang]}\nFrom: Carol <carol@example.test>\n"
            f"Date: Mon, 2 Mar 2026 08:00\nSubject: Nightly job\nTo: <{ALICE}>\n\n{FORWARDED}\n"
        )
        return Case(
            f"plain-{client}-forward-{lang}",
            build("Fwd: Nightly job", plain=text),
            (REQUEST[lang], FORWARDED, "Carol"),
        )
    mailer = {"mutt": "Mutt/2.2.12", "alpine": "Alpine 2.26"}.get(client, "")
    return Case(
        f"plain-{client}-{shape}-{lang}", build("Re: Build", plain=text, mailer=mailer), keep, drop
    )
