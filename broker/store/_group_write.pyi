"""Types of the native group writer (broker/store/_group_write.c)."""

class GroupWriter:
    syncs: int
    bytes_written: int

    def __init__(self, done_fd: int) -> None: ...
    def submit(
        self,
        number: int,
        fd: int,
        data: bytes | bytearray | memoryview | None,
        sync: bool,
        dir_fd: int = -1,
        header: bytes | bytearray | memoryview | None = None,
        last: bool = True,
    ) -> None: ...
    def take_done(self) -> tuple[int, list[tuple[int, int]]]: ...
    def close(self) -> None: ...
