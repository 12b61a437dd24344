"""The email channel: IMAP in (IDLE, else polling), SMTP out, DMARC-authenticated senders."""

from gateway_bot.channels.email.adapter import EmailAdapter

__all__ = ["EmailAdapter"]
