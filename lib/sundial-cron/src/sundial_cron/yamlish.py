"""A YAML reader for Kubernetes manifests, with the standard library only: what `kubectl
kustomize`, `helm template` and hand-written manifests use. Block mappings and sequences,
plain, single- and double-quoted scalars (over several lines too), `|` and `>` block
scalars, flow `[...]` and `{...}`, comments, `---` between documents, anchors and aliases,
tags (ignored). Not: complex keys (`? `), merge keys (`<<`), directives (`%YAML`).
Scalars resolve as YAML 1.2's core schema: null, true/false, integers, floats, strings."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_NULL = {"", "~", "null", "Null", "NULL"}
_TRUE = {"true", "True", "TRUE"}
_FALSE = {"false", "False", "FALSE"}
_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)|0o[0-7]+|0x[0-9a-fA-F]+")
_FLOAT = re.compile(
    r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)"
)
_ESCAPES = {
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "t": "\t",
    "\t": "\t",
    "n": "\n",
    "v": "\v",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "/": "/",
    "\\": "\\",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}
_HEX = {"x": 2, "u": 4, "U": 8}


class YamlError(ValueError):
    """Text this reader cannot read; the message has the line."""


def load_all(text: str) -> list[Any]:
    """Every document of `text` (empty documents left out)."""
    documents: list[list[str]] = [[]]
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith("---") and (len(line) == 3 or line[3] in " \t"):
            documents.append([])
            rest = line[3:].strip()
            if rest and not rest.startswith("#"):
                documents[-1].append(rest)  # `--- value` or `--- |`
        elif line.startswith("...") and line[3:].strip() in ("", "#"):
            documents.append([])
        elif line.startswith("%") and not any(strip_comment(seen) for seen in documents[-1]):
            continue  # a directive, before the document's content
        else:
            documents[-1].append(line)
    loaded: list[Any] = []
    for lines in documents:
        reader = _Reader(lines)
        if reader.peek() is None:
            continue
        loaded.append(reader.document())
    return loaded


def scalar(text: str) -> Any:
    """A plain scalar's value."""
    if text in _NULL:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if _INT.fullmatch(text):
        return int(text, 0) if text[:2] in ("0o", "0x") else int(text)
    if _FLOAT.fullmatch(text):
        lowered = text.lower().lstrip("+")
        if lowered in (".inf", "-.inf", ".nan"):
            return float(lowered.replace(".", ""))
        return float(text)
    return text


def _outside_quotes(text: str) -> Iterator[tuple[int, str]]:
    """The characters of `text` that are not in a quoted scalar, with their index."""
    quote = ""
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"" and (index == 0 or text[index - 1] in " \t[{,:"):
            quote = char
        else:
            yield index, char


def strip_comment(text: str) -> str:
    """`text` without a trailing comment (a # at the start or after a space, not quoted)."""
    for index, char in _outside_quotes(text):
        if char == "#" and (index == 0 or text[index - 1] in " \t"):
            return text[:index].rstrip()
    return text.rstrip()


class _Reader:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.at = 0
        self.anchors: dict[str, Any] = {}

    def fail(self, why: str) -> YamlError:
        line = min(self.at, len(self.lines) - 1)
        shown = self.lines[line].strip() if self.lines else ""
        return YamlError(f"line {line + 1} ({shown!r}): {why}")

    def peek(self) -> tuple[int, str] | None:
        """The next line with content: its indentation and its text, comments kept."""
        while self.at < len(self.lines):
            line = self.lines[self.at]
            text = line.strip()
            if text and not text.startswith("#"):
                return len(line) - len(line.lstrip(" ")), text
            self.at += 1
        return None

    def document(self) -> Any:
        first = self.peek()
        assert first is not None
        value = self.node(first[0])
        rest = self.peek()
        if rest is not None:
            raise self.fail("more than one value at the top of the document")
        return value

    def node(self, indent: int) -> Any:
        """The block node that starts on the next line, at `indent`."""
        peeked = self.peek()
        if peeked is None or peeked[0] < indent:
            return None
        indent, text = peeked
        if text == "-" or text.startswith("- "):
            return self.sequence(indent)
        if _key(text) is not None:
            return self.mapping(indent)
        self.at += 1
        return self.value(strip_comment(text), indent - 1)

    def mapping(self, indent: int) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        while (peeked := self.peek()) is not None and peeked[0] >= indent:
            if peeked[0] > indent:
                raise self.fail("indented more than the mapping's keys")
            split = _key(peeked[1])
            if split is None:
                break  # a sequence under the parent's key, at the parent's indentation
            key, rest = split
            self.at += 1
            result[key] = self.after_key(strip_comment(rest), indent)
        return result

    def after_key(self, rest: str, indent: int) -> Any:
        """The value after `key:` of a mapping at `indent`: on the same line, or the block
        below (more indented, or a sequence at the key's own indentation)."""
        tagged_str = rest.startswith("!!str ")
        rest, anchor = self.properties(rest)
        if rest:
            value = self.value(rest, indent)
            if tagged_str and not isinstance(value, str | list | dict):
                value = rest
        else:
            peeked = self.peek()
            nested = peeked is not None and (
                peeked[0] > indent
                or (peeked[0] == indent and (peeked[1] == "-" or peeked[1].startswith("- ")))
            )
            value = self.node(peeked[0]) if nested and peeked is not None else None
        if anchor:
            self.anchors[anchor] = value
        return value

    def sequence(self, indent: int) -> list[Any]:
        items: list[Any] = []
        while (peeked := self.peek()) is not None and peeked[0] == indent:
            text = peeked[1]
            if not (text == "-" or text.startswith("- ")):
                break
            rest = text[1:].lstrip(" ")
            offset = indent + len(text) - len(rest)
            content = strip_comment(rest)
            bare, _ = self.properties(content)
            if content and (_key(content) is not None or bare == "-" or bare.startswith("- ")):
                if bare != content:
                    raise self.fail("an anchor or tag before a nested block item")
                # `- key: value` or `- - item`: the rest is a node at the rest's column.
                self.lines[self.at] = " " * offset + rest
                items.append(self.node(offset))
                continue
            self.at += 1
            items.append(self.after_key(content, indent))
        return items

    def properties(self, text: str) -> tuple[str, str | None]:
        """`text` without its tag and anchor (`!!str`, `&name`), and the anchor's name."""
        anchor = None
        while text[:1] in ("!", "&"):
            word, _, text = text.partition(" ")
            if word.startswith("&"):
                anchor = word[1:]
            text = text.lstrip()
        return text, anchor

    def value(self, text: str, indent: int) -> Any:
        """A value written on a line (a scalar, flow, alias or block scalar header), and the
        lines that continue it (more indented than `indent`)."""
        if text.startswith("*"):
            name = text[1:]
            if name not in self.anchors:
                raise self.fail(f"alias *{name} names no anchor")
            return self.anchors[name]
        if text[0] in "|>":
            return self.block_scalar(text, indent)
        if text[0] in "[{":
            while _flow_depth(text) > 0:
                if self.at >= len(self.lines):
                    raise self.fail("a flow collection is not closed")
                text += " " + strip_comment(self.lines[self.at].strip())
                self.at += 1
            parsed, end = _Flow(text, self).parse(0)
            if text[end:].strip():
                raise self.fail(f"text after a flow collection: {text[end:].strip()!r}")
            return parsed
        if text[0] in "'\"":
            while not _closed(text):
                if self.at >= len(self.lines):
                    raise self.fail("a quoted scalar is not closed")
                text += "\n" + self.lines[self.at].strip()
                self.at += 1
            end = _quote_end(text, 0)
            if strip_comment(text[end:]).strip():
                raise self.fail(f"text after a quoted scalar: {text[end:].strip()!r}")
            return _unquote(text[:end])
        folded, continued = text, False
        while True:
            blank = self.at
            while blank < len(self.lines) and not self.lines[blank].strip():
                blank += 1
            if blank >= len(self.lines):
                break
            line = self.lines[blank]
            if len(line) - len(line.lstrip(" ")) <= indent or line.strip().startswith("#"):
                break
            if _key(line.strip()) is not None:
                self.at = blank
                raise self.fail("a mapping entry indented under a plain scalar")
            breaks = blank - self.at
            folded += ("\n" * breaks if breaks else " ") + strip_comment(line.strip())
            continued, self.at = True, blank + 1
        return folded if continued else scalar(text)

    def block_scalar(self, header: str, indent: int) -> str:
        literal = header[0] == "|"
        chomp = "+" if "+" in header else "-" if "-" in header else ""
        digits = "".join(char for char in header if char.isdigit())
        raw: list[str] = []
        while self.at < len(self.lines):
            line = self.lines[self.at]
            if line.strip() and len(line) - len(line.lstrip(" ")) <= indent:
                break
            raw.append(line)
            self.at += 1
        content = [line for line in raw if line.strip()]
        if digits:
            width = indent + 1 + int(digits) if indent >= 0 else int(digits)
        else:
            width = min((len(line) - len(line.lstrip(" ")) for line in content), default=0)
        body = [line[width:] for line in raw]
        while body and not body[-1].strip():
            body.pop()
        text = "\n".join(body) if literal else _fold(body)
        kept_blank = len(raw) - len(body)
        if chomp == "-" or not body:
            return text
        if chomp == "+":
            return text + "\n" * (1 + kept_blank)
        return text + "\n"


def _fold(lines: list[str]) -> str:
    """A folded block scalar's lines: joined by spaces, a blank line a newline, more
    indented lines kept as they are."""
    out = ""
    previous_plain = False
    for line in lines:
        if not line.strip():
            out += "\n"
            previous_plain = False
            continue
        plain = not line.startswith((" ", "\t"))
        if out and not out.endswith("\n"):
            out += " " if plain and previous_plain else "\n"
        out += line
        previous_plain = plain
    return out


def _key(text: str) -> tuple[Any, str] | None:
    """`key: rest` split, or None when the line is no mapping entry."""
    if text[0] in "'\"":
        end = _quote_end(text, 0)
        if end < 0 or text[end : end + 1] != ":" or text[end + 1 : end + 2] not in ("", " "):
            return None
        return _unquote(text[:end]), text[end + 1 :].strip()
    if text[0] in "[{#*|>%@`" or text.startswith("- ") or text == "-":
        return None
    for index, char in enumerate(text):
        if char == "#" and index and text[index - 1] == " ":
            return None
        if char == ":" and (index + 1 == len(text) or text[index + 1] in " \t"):
            key = text[:index].rstrip()
            if key.startswith(("&", "!")):
                return None
            return scalar(key), text[index + 1 :].strip()
    return None


def _quote_end(text: str, start: int) -> int:
    """The index after the quote that closes the one at `start`; -1 if none."""
    quote = text[start]
    index = start + 1
    while index < len(text):
        char = text[index]
        if quote == '"' and char == "\\":
            index += 2
            continue
        if char == quote:
            if quote == "'" and text[index + 1 : index + 2] == "'":
                index += 2
                continue
            return index + 1
        index += 1
    return -1


def _closed(text: str) -> bool:
    return _quote_end(text, 0) > 0


def _unquote(text: str) -> str:
    """A quoted scalar's value (its quotes included in `text`); line breaks folded."""
    quote, body = text[0], text[1:-1]
    body = re.sub(r"[ \t]*\n[ \t]*", "\n", body)
    body = re.sub(r"(?<!\n)\n(?!\n)", " ", body)
    body = re.sub(r"\n(\n+)", r"\1", body)
    if quote == "'":
        return body.replace("''", "'")
    out: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        code = body[index + 1 : index + 2]
        if code in _HEX:
            digits = body[index + 2 : index + 2 + _HEX[code]]
            out.append(chr(int(digits, 16)))
            index += 2 + _HEX[code]
        else:
            out.append(_ESCAPES.get(code, code))
            index += 2
    return "".join(out)


def _flow_depth(text: str) -> int:
    """How many flow collections `text` opens and leaves open."""
    return sum(1 if char in "[{" else -1 for _, char in _outside_quotes(text) if char in "[]{}")


class _Flow:
    """`[a, b]` and `{k: v}`, nested, on one (joined) line."""

    def __init__(self, text: str, reader: _Reader) -> None:
        self.text = text
        self.reader = reader

    def skip(self, at: int) -> int:
        while at < len(self.text) and self.text[at] in " \t\n":
            at += 1
        return at

    def parse(self, at: int) -> tuple[Any, int]:
        at = self.skip(at)
        char = self.text[at : at + 1]
        if char == "[":
            return self.collection(at + 1, "]")
        if char == "{":
            return self.collection(at + 1, "}")
        if char in ("'", '"'):
            end = _quote_end(self.text, at)
            if end < 0:
                raise self.reader.fail("a quoted scalar is not closed")
            return _unquote(self.text[at:end]), end
        end = at
        while end < len(self.text) and self.text[end] not in ",]}":
            if self.text[end] == ":" and self.text[end + 1 : end + 2] in (" ", ",", "]", "}", ""):
                break
            end += 1
        word = self.text[at:end].strip()
        if word.startswith("*"):
            return self.reader.value(word, 0), end
        return scalar(self.reader.properties(word)[0]), end

    def collection(self, at: int, close: str) -> tuple[Any, int]:
        items: list[Any] = []
        pairs: dict[Any, Any] = {}
        while True:
            at = self.skip(at)
            if self.text[at : at + 1] == close:
                return (pairs if close == "}" else items), at + 1
            if at >= len(self.text):
                raise self.reader.fail("a flow collection is not closed")
            item, at = self.parse(at)
            at = self.skip(at)
            if self.text[at : at + 1] == ":":
                value, at = self.parse(at + 1)
                if close == "}":
                    pairs[item] = value
                else:
                    items.append({item: value})
            elif close == "}":
                pairs[item] = None
            else:
                items.append(item)
            at = self.skip(at)
            if self.text[at : at + 1] == ",":
                at += 1
            elif self.text[at : at + 1] != close:
                raise self.reader.fail(f"expected ',' or {close!r} in a flow collection")
