"""The one "invalid spec" error of modalscale: which field, what is wrong, and the condition reason to report.

Why a module: the InferenceService parser, the scaling policy, the runtime's repository generator, the budget
planner and the quantity grammar each had their own exception type, and the operator turned one into another by
splitting messages at the first colon. They are all this type now (the older names are subclasses), so the
operator reads ``field`` and ``reason`` instead of parsing text.
"""

from __future__ import annotations

from modalscale.api.conditions import INVALID_SPEC


class InvalidSpec(ValueError):
    """A spec field cannot be acted on.

    Attributes:
        field: Path of the field, e.g. ``spec.scaling.maxReplicas`` or ``spec.thresholds[1].capReplicas``.
        message: What is wrong and the fix, without the field.
        reason: CamelCase condition/Event reason to report it with (``InvalidSpec`` unless a subclass says
            more, e.g. ``UnknownGPUPrice``).

    ``str(error)`` is ``"<field>: <message>"``.
    """

    def __init__(self, field: str, message: str, reason: str = INVALID_SPEC) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.reason = reason

    def __reduce__(self) -> tuple[type[InvalidSpec], tuple[str, str, str]]:
        return (type(self), (self.field, self.message, self.reason))
