# The part of google-re2's API perdure uses (the wheel ships no type information).
_Text = str | bytes | bytearray | memoryview

class error(Exception): ...

class Options:
    max_mem: int
    log_errors: bool
    literal: bool
    never_nl: bool
    case_sensitive: bool
    def __init__(self) -> None: ...

class _Match:
    def start(self, group: int = 0) -> int: ...
    def end(self, group: int = 0) -> int: ...

class _Regexp:
    def search(
        self, text: _Text, pos: int | None = None, endpos: int | None = None
    ) -> _Match | None: ...
    def fullmatch(
        self, text: _Text, pos: int | None = None, endpos: int | None = None
    ) -> _Match | None: ...

def compile(pattern: str | bytes, options: Options | None = None) -> _Regexp: ...
def escape(pattern: str) -> str: ...
