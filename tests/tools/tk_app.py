"""A small real Tk window for the X11 UI tests (run as a subprocess on an Xvfb display).

A red "Go" button, a yellow entry and a label at fixed places; every state change is printed to
stdout as one JSON line, so the test reads back what the clicks and keystrokes did:

    {"event": "ready", "x": <window left>, "y": <window top>, "width": ..., "height": ...}
    {"event": "press", "x": <pointer x on the screen>, "y": ...}   # mouse button 1 on the button
    {"event": "click", "count": n}                                  # the button's command ran
    {"event": "entry", "value": "..."}                              # the entry's text changed
    {"event": "submit", "value": "..."}                             # Return in the entry

Runs under any Python with tkinter (the venv's, or Debian's /usr/bin/python3 with python3-tk).
"""

import json
import sys
import tkinter as tk


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main() -> None:
    root = tk.Tk()
    root.title("kimik3 Tk test")
    root.geometry("600x400+40+60")
    root.configure(bg="#d0d0d0")
    font = ("DejaVu Sans", 16)
    clicks = 0
    label = tk.Label(root, text="clicked 0", bg="#d0d0d0", fg="#000000", font=font)
    label.place(x=260, y=75)

    def on_click() -> None:
        nonlocal clicks
        clicks += 1
        label.config(text=f"clicked {clicks}")
        emit(event="click", count=clicks)

    button = tk.Button(
        root, text="Go", command=on_click, font=font, bg="#dd0000", fg="#ffffff",
        activebackground="#dd0000", activeforeground="#ffffff", relief="flat", bd=0, highlightthickness=0,
    )  # fmt: skip
    button.place(x=60, y=60, width=160, height=60)
    button.bind("<ButtonPress-1>", lambda e: emit(event="press", x=e.x_root, y=e.y_root), add="+")

    value = tk.StringVar()
    value.trace_add("write", lambda *_: emit(event="entry", value=value.get()))
    entry = tk.Entry(
        root, textvariable=value, font=font, bg="#ffee00", fg="#000000", relief="flat", bd=0,
        highlightthickness=0, insertofftime=0,
    )  # fmt: skip
    entry.place(x=60, y=180, width=400, height=44)
    entry.bind("<Return>", lambda e: emit(event="submit", value=value.get()))

    def ready() -> None:
        root.update_idletasks()
        emit(event="ready", x=root.winfo_rootx(), y=root.winfo_rooty(), width=root.winfo_width(),
             height=root.winfo_height())  # fmt: skip

    root.wait_visibility()
    root.after(300, ready)
    root.mainloop()


if __name__ == "__main__":
    main()
