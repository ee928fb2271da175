# structlog first through common.log, which imports it without rich (a fifth of a start-up)
import common.log  # noqa: F401
