"""A process that dies as a served vLLM's killed workers do: semaphores and shared memory still
registered with multiprocessing's resource tracker, which reports them at its shutdown."""

import multiprocessing as mp
import os
import signal
from multiprocessing import shared_memory

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    semaphores = [ctx.Semaphore(1) for _ in range(3)]
    memory = shared_memory.SharedMemory(create=True, size=16)
    print(memory.name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
