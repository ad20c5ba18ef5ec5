# The C template reader (_reader.c); see Template.reader in template.py.
class Reader:
    def __init__(
        self,
        obs: object,
        kind: int,
        head: bytes,
        left: tuple[tuple[int, bytes], ...],
        right: tuple[tuple[bytes, int], ...],
        tail: bytes,
    ) -> None: ...
    def __call__(self, data: bytes, /) -> int: ...
    def run(
        self, data: bytes, pos: int, limit: int, end: bytes = ..., /
    ) -> tuple[int, int, int]: ...
    def run_objects(
        self, data: bytes, pos: int, limit: int, skip: int = ..., /
    ) -> tuple[int, int, int]: ...

def scan(data: bytes, pos: int, depth: int, string: int, /) -> tuple[int, int, int]: ...
