"""Base of every config section: unknown keys are errors, so a typo is never ignored."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
