"""The shared state of one window: what is open, what is typed, what is selected.

Views never talk to each other directly; they read and write the `Session` and react to
its signals. That keeps each view testable on its own with a bare Session.
"""
from __future__ import annotations

from PySide6.QtCore import QObject, Signal


class Session(QObject):
    """What the window has open. Setting a field emits the matching signal."""

    tokenizer_changed = Signal(object)   # Tokenizer
    weights_changed = Signal(object)     # WeightFile | None
    text_changed = Signal(object)        # str: the Tokenize view's text (object: no QString copy of 1 MB per keystroke)
    token_selected = Signal(int)         # a token id picked in any view
    tensor_selected = Signal(str)        # a tensor name picked in any view
    status_posted = Signal(str)          # a message for the status bar
    error_raised = Signal(str, str)      # (title, message): one handler shows it

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.tokenizer = None
        self.weights = None
        self.text = ""
        self.path: str | None = None
        self.selected_token: int | None = None  # last id passed to select_token
        self.tensor: str | None = None   # name of the selected tensor

    def set_tokenizer(self, tokenizer, path: str | None = None) -> None:
        self.tokenizer = tokenizer
        if path is not None:
            self.path = path
        self.tokenizer_changed.emit(tokenizer)

    def set_weights(self, weights) -> None:
        old, self.weights = self.weights, weights
        self.tensor = None  # a name from the old file means nothing in the new one
        self.weights_changed.emit(weights)
        if old is not None and old is not weights:
            old.close()

    def set_text(self, text: str) -> None:
        if text != self.text:
            self.text = text
            self.text_changed.emit(text)

    def select_token(self, token_id: int) -> None:
        self.selected_token = token_id
        self.token_selected.emit(token_id)

    def select_tensor(self, name: str) -> None:
        """Make `name` the selected tensor of every tensor view (emitted only on change)."""
        if name != self.tensor:
            self.tensor = name
            self.tensor_selected.emit(name)
