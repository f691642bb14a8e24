"""What opening a path loads, without Qt (it runs in the window's worker).

`load_path(path)` runs off the GUI thread: a .gguf (or a folder holding one, or the shards
of one split model) gives a tokenizer and weights, a .safetensors weights, a model folder
(config.json) weights and its tokenizer, anything else a tokenizer.
"""
from __future__ import annotations

import errno
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: where GGUF keeps its vocabulary; a file without it has weights only
GGUF_TOKENIZER_KEY = "tokenizer.ggml.model"
#: what warms a new tokenizer up: over 64 different pre-tokens (the batch paths) of prose,
#: code, digits, CJK, Cyrillic and emoji, like the Tokenize view's default text
WARM_UP_TEXT = " ".join([
    "Tokenizers don't see words: they see pieces. Here's how a model splits text,",
    "including numbers like 1234567 and 3.14159, symbols such as € © ™ and URLs like",
    "https://example.com/path?query=value&other=42#anchor.",
    "def greet(name: str) -> str:\n    return f\"Hello, {name}!\"  # comment\n\t\tindented",
    "東京は日本の首都です。 Привет, мир! Токенизация текста. Γειά σου κόσμε. مرحبا بالعالم",
    "Emoji: 👩‍💻 and 👨‍👩‍👧 are ZWJ sequences; ☕ costs 3€. naïve café résumé Ångström",
    "The quick brown fox jumps over the lazy dog; THE QUICK BROWN FOX, again and again.",
])


@dataclass
class Opened:
    """What a worker loaded for one path."""

    path: str
    tokenizer: object = None
    weights: object = None
    note: str = ""


def load_path(path: str) -> Opened:
    """Load what `path` holds (runs in a worker): tokenizer and/or weights."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(errno.ENOENT, "no such file or folder", path)
    if p.is_dir():
        if (p / "config.json").exists() or any(p.glob("*.safetensors")):
            return _load_model_folder(p)
        if any(p.glob("*.gguf")):  # one GGUF, or the shards of one split model
            return _load_gguf(p)
        return Opened(path, tokenizer=_load_tokenizer(p))
    if p.suffix == ".gguf" or _head(p, 4) == b"GGUF":
        return _load_gguf(p)
    if p.suffix == ".safetensors":
        weights = _open_weights(p)
        if weights is None:
            raise RuntimeError(f"{path}: safetensors support is not available in this build")
        return Opened(path, weights=weights)
    return Opened(path, tokenizer=_load_tokenizer(p))


def _load_gguf(path: Path) -> Opened:
    """Weights and tokenizer; a file without a vocabulary (a LoRA adapter, a vision
    projector) opens as weights only, and the tokenizer that was open stays."""
    weights = _open_weights(path)
    if weights is not None and GGUF_TOKENIZER_KEY not in weights.metadata:
        return Opened(str(path), weights=weights,
                      note=f"Opened {path}: it has no vocabulary, the open tokenizer stays")
    # a folder's GGUF (or its split model's first shard) holds the vocabulary
    source = Path(weights.files[0]) if path.is_dir() and weights is not None else path
    try:
        return Opened(str(path), tokenizer=_load_tokenizer(source), weights=weights)
    except BaseException:
        close_unused(Opened(str(path), weights=weights))
        raise


def _load_model_folder(folder: Path) -> Opened:
    """A Hugging Face model folder: weights, and the tokenizer when there is one."""
    from forma_gui.errors import FormatError

    weights = _open_weights(folder)
    try:
        tokenizer = _load_tokenizer(folder)
    except FormatError as e:
        if weights is None:
            raise
        return Opened(str(folder), weights=weights, note=f"no tokenizer loaded: {e}")
    return Opened(str(folder), tokenizer=tokenizer, weights=weights)


def _load_tokenizer(path: Path):
    import forma_gui

    tokenizer = forma_gui.load_tokenizer(path)
    _warm_up(tokenizer)
    return tokenizer


def _warm_up(tokenizer) -> None:
    """Encode a sample once, here in the worker: tokenizers build lookup tables on first use,
    and that first use would otherwise be the Tokenize view's, on the GUI thread (~40 ms for
    a small vocabulary, far more for a 262k one)."""
    try:
        tokenizer.segment(WARM_UP_TEXT)
        last = tokenizer.vocab_size - 1  # what the Vocabulary view asks of every row it paints
        tokenizer.piece(last), tokenizer.token_bytes(last)
        tokenizer.token_type(last), tokenizer.token_score(last)
    except Exception:  # noqa: BLE001 - a tokenizer that cannot encode says so where it is used
        log.debug("warming up %r failed", tokenizer, exc_info=True)


def _open_weights(path: Path):
    """open_weights, or None while the weights reader is not part of this build."""
    import forma_gui

    try:
        return forma_gui.open_weights(path)
    except ImportError as e:
        if e.name and e.name.startswith("forma_gui"):
            log.warning("weights reader unavailable: %s", e)
            return None
        raise


def _head(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def close_unused(opened: Opened) -> None:
    """Release a load result nobody will use (a newer open replaced it)."""
    if opened is not None and opened.weights is not None and hasattr(opened.weights, "close"):
        opened.weights.close()


def describe_error(path: str, error: BaseException) -> str:
    """One line naming the file, the problem and (for FormatError) the offset."""
    from forma_gui.errors import FormatError

    if isinstance(error, FormatError):
        text = str(error)
        return text if error.path else f"{path}: {text}"
    if isinstance(error, OSError):
        return f"{path}: {error.strerror or error}"
    text = str(error) or type(error).__name__
    return text if path in text else f"{path}: {text}"

