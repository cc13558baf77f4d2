"""Set-up for the whole suite: the tests do not depend on how the suite was started."""

import signal

# A suite started in the background of a non-interactive shell (`make test &`, `nohup`) inherits
# SIGINT ignored, and so would every child it starts: Python keeps an inherited ignored SIGINT
# ignored, so the tests that press Ctrl-C in a child (kimik3 run / eval / serve) would wait for
# nothing. With a handler here, children start with the default disposition (exec resets it).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
