"""Error demonstrations in the chapters end in their message (lab.source.shorten_traceback)."""

from learn_parallel.lab.source import shorten_traceback

RED = "\x1b[31m"


def test_library_frames_between_the_cell_and_the_last_two_become_one_line():
    entries = [
        "-" * 20,
        f"{RED}RuntimeError\x1b[39m   Traceback (most recent call last)",
        f"{RED}Cell In[3], line 2\x1b[39m\n----> 2 model(x)",
        "File torch/nn/modules/module.py:1789, in Module._call_impl",
        "File torch/nn/modules/container.py:250, in Sequential.forward",
        "File torch/nn/modules/module.py:1789, in Module._call_impl",
        "File torch/nn/modules/linear.py:134, in Linear.forward",
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied",
    ]
    short = shorten_traceback(entries)
    assert short == [
        *entries[:3],
        "... 2 frames of library code ...",
        *entries[5:],
    ]


def test_a_short_traceback_and_the_readers_own_frames_stay_whole():
    own = ["header", "Cell In[1], line 1", "Cell In[1], line 4, in f", "File a.py:1", "Err: x"]
    assert shorten_traceback(own) == own
    nested = ["h", "Cell In[2], line 1", "File a.py", "Cell In[2], line 5, in g", "File b.py"]
    nested += ["File c.py", "Err: y"]
    assert (
        shorten_traceback(nested)
        == ["h", "Cell In[2], line 1", "... 1 frame of library code ..."] + nested[3:]
    )
