"""The benchmark's timing graphs (``rl_triton._bench.graph_calls``): which calls a device-time graph holds."""

import contextlib

import torch

from rl_triton._bench import MIN_GRAPH_CALLS, Implementation, Timer, graph_calls


def test_a_graph_repeats_the_input_sets_in_turn():
    sets = ["a", "b", "c"]
    calls = graph_calls(sets)
    assert len(calls) == MIN_GRAPH_CALLS
    # every set comes back only after all the others
    assert calls == [sets[index % 3] for index in range(MIN_GRAPH_CALLS)]


def test_a_graph_holds_every_set_once_at_least():
    sets = list(range(MIN_GRAPH_CALLS + 2))
    assert graph_calls(sets) == sets


def test_python_loop_baselines_keep_their_few_calls():
    assert graph_calls(["a", "b", "c"], max_calls=2) == ["a", "b"]


def test_repeats_stop_where_the_outputs_would_not_fit():
    sets = ["a", "b", "c"]
    assert len(graph_calls(sets, output_bytes=100, room=1000)) == 10
    # one call per set even without room for them
    assert graph_calls(sets, output_bytes=100, room=50) == sets
    assert len(graph_calls(sets, output_bytes=100, room=10**9)) == MIN_GRAPH_CALLS


class _FakeCuda:
    """Enough of ``torch.cuda`` for ``Timer.graph_replay``'s Python to run on a CPU: every call made while a graph
    is captured is recorded, and the graph's replays take 1 ms."""

    def __init__(self, free_bytes: int) -> None:
        self.free_bytes = free_bytes
        self.captured: list = []
        self.capturing = False
        self.slept = 0

    def install(self, monkeypatch) -> None:
        fake = self

        class Stream:
            def __init__(self, *args, **kwargs) -> None:
                pass

            def wait_stream(self, other) -> None:
                pass

        class Graph:
            def replay(self) -> None:
                pass

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.time = 0.0

            def record(self) -> None:
                pass

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end) -> float:
                return 1.0

        @contextlib.contextmanager
        def capture(graph):
            fake.capturing = True
            yield
            fake.capturing = False

        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
        monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "graph", capture)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (fake.free_bytes, 2 * fake.free_bytes))
        monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: setattr(fake, "slept", fake.slept + 1))

    def call(self, inputs):
        if self.capturing:
            self.captured.append(inputs["set"])
        return torch.zeros(250)  # 1000 bytes of output


def test_graph_replay_times_the_sets_in_turn_and_holds_the_stream(monkeypatch):
    fake = _FakeCuda(free_bytes=10**9)
    fake.install(monkeypatch)
    timer = Timer(torch.device("cuda"), quick=True)
    sets = [{"set": index} for index in range(3)]
    seconds = timer.graph_replay(Implementation("fake", fake.call), sets, estimate=1e-3)
    assert fake.captured == [index % 3 for index in range(MIN_GRAPH_CALLS)]
    # 1 ms a replay over its calls; one hold before each timed replay
    assert seconds == 1e-3 / MIN_GRAPH_CALLS
    assert fake.slept >= 5


def test_graph_replay_repeats_no_more_calls_than_half_the_free_memory_holds(monkeypatch):
    fake = _FakeCuda(free_bytes=2 * 7000)  # room for the outputs of 7 calls
    fake.install(monkeypatch)
    Timer(torch.device("cuda"), quick=True).graph_replay(Implementation("fake", fake.call),
                                                         [{"set": index} for index in range(3)], estimate=1e-3)
    assert fake.captured == [0, 1, 2, 0, 1, 2, 0]
