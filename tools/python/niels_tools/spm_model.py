"""A SentencePiece model (tokenizer.model) read from its protobuf wire format, and niels_gpt's
special tokens. No sentencepiece or protobuf package is needed: the tools read the few fields they
use by field number (sentencepiece_model.proto):

  ModelProto.pieces = 1 {piece = 1, score = 2, type = 3}
  ModelProto.trainer_spec = 2 {model_type = 3, treat_whitespace_as_suffix = 24, byte_fallback = 35}
  ModelProto.normalizer_spec = 3 {name = 1, precompiled_charsmap = 2, add_dummy_prefix = 3,
                                  remove_extra_whitespaces = 4, escape_whitespaces = 5}

Fields a file leaves out have the proto's defaults (model_type UNIGRAM, add_dummy_prefix,
remove_extra_whitespaces and escape_whitespaces true, the others false or empty).
"""

import struct

# SentencePiece piece types (ModelProto.SentencePiece.Type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# Model types (TrainerSpec.ModelType).
UNIGRAM, BPE = 1, 2

# niels_gpt's four special tokens, each one piece of its tokenizer (docs/ARCHITECTURE.md,
# "Tokenizer, chat template and sampling").
SPECIAL_SUFFIX = "84a5023f67d74cf29cc4001becde983c"
ROLES = ("sys", "usr", "asst", "eot")
SPECIAL_TOKENS = {role: f"<|ngpt_{role}_{SPECIAL_SUFFIX}|>" for role in ROLES}


class SpmModelError(Exception):
    """The file is missing or is not a SentencePiece model; the message names the file."""


class SpmModel:
    """What a tokenizer.model holds that the tools use."""

    def __init__(self, path):
        self.path = path
        self.pieces = []   # piece strings, by id
        self.scores = []   # their scores
        self.types = []    # their types (NORMAL, CONTROL, ...)
        self.model_type = UNIGRAM
        self.byte_fallback = False
        self.treat_whitespace_as_suffix = False
        self.normalizer = "nmt_nfkc"  # the rule's name; the rule itself is precompiled_charsmap
        # The compiled normalization rule: a uint32 trie size, the darts-clone double array, then
        # the NUL-terminated replacement strings. Empty for "identity" (no character mapping).
        self.precompiled_charsmap = b""
        self.add_dummy_prefix = True
        self.remove_extra_whitespaces = True
        self.escape_whitespaces = True

    def special_ids(self):
        """{role: id} of niels_gpt's special tokens; SpmModelError naming the first one missing."""
        ids = {}
        for role, literal in SPECIAL_TOKENS.items():
            if literal not in self.pieces:
                raise SpmModelError(f"{self.path}: lacks the special token {literal} as a single piece "
                                    "(docs/ARCHITECTURE.md, 'Tokenizer, chat template and sampling')")
            ids[role] = self.pieces.index(literal)
        return ids


def _varint(buf, pos):
    result, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, pos


def _fields(buf):
    """Yields (field number, wire type, value) of one protobuf message; LEN values are bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = bytes(buf[pos:pos + 8]), pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = bytes(buf[pos:pos + n]), pos + n
        elif wire == 5:
            value, pos = bytes(buf[pos:pos + 4]), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(buf):
            raise ValueError("truncated field")
        yield field, wire, value


def _read_piece(message):
    piece, score, ptype = None, 0.0, NORMAL
    for f, w, v in _fields(message):
        if f == 1 and w == 2:
            piece = v.decode("utf-8")
        elif f == 2 and w == 5:
            score = struct.unpack("<f", v)[0]
        elif f == 3 and w == 0:
            ptype = v
    if piece is None:
        raise ValueError("a piece without text")
    return piece, score, ptype


def read_spm_model(path):
    """The SpmModel at `path`; SpmModelError when it cannot be read or parsed, or has no pieces."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SpmModelError(f"tokenizer {path}: cannot be read: {e.strerror}") from e
    model = SpmModel(path)
    try:
        for field, wire, value in _fields(data):
            if field == 1 and wire == 2:
                piece, score, ptype = _read_piece(value)
                model.pieces.append(piece)
                model.scores.append(score)
                model.types.append(ptype)
            elif field == 2 and wire == 2:
                for f, w, v in _fields(value):
                    if f == 3 and w == 0:
                        model.model_type = v
                    elif f == 24 and w == 0:
                        model.treat_whitespace_as_suffix = bool(v)
                    elif f == 35 and w == 0:
                        model.byte_fallback = bool(v)
            elif field == 3 and wire == 2:
                for f, w, v in _fields(value):
                    if f == 1 and w == 2:
                        model.normalizer = v.decode("utf-8")
                    elif f == 2 and w == 2:
                        model.precompiled_charsmap = v
                    elif f == 3 and w == 0:
                        model.add_dummy_prefix = bool(v)
                    elif f == 4 and w == 0:
                        model.remove_extra_whitespaces = bool(v)
                    elif f == 5 and w == 0:
                        model.escape_whitespaces = bool(v)
    except (ValueError, UnicodeDecodeError) as e:
        raise SpmModelError(f"tokenizer {path}: not a SentencePiece model ({e})") from e
    if not model.pieces:
        raise SpmModelError(f"tokenizer {path}: not a SentencePiece model (no pieces)")
    charsmap = model.precompiled_charsmap
    if charsmap and (len(charsmap) <= 4 or int.from_bytes(charsmap[:4], "little") + 4 >= len(charsmap)):
        # <trie size: uint32 LE><trie><replacement strings>, as SentencePiece's normalizer decodes it
        raise SpmModelError(f"tokenizer {path}: normalizer_spec.precompiled_charsmap ({len(charsmap)} bytes) "
                            "is not a compiled normalization rule (its trie size runs past its end)")
    return model
