"""A training-shaped PyTorch loop that needs no GPU kernel, for tools/torch-check.

cuda-shim runs no device code (a torch kernel op fails with "invalid device function"), so
every tensor is made on the host and moved with copies only: weights uploaded once and
refreshed each iteration (the "optimizer step"), a pinned batch uploaded with
non_blocking=True, activations of mixed sizes (torch.empty, then a host-to-device copy and a
device-to-device copy of a weight slice), "gradients" copied from them on a side stream ordered
with events, and every tensor copied back into pinned host memory and compared with what it must
hold. Prints key=value lines (tools/torch-check reads them) and "workload ok"; exits 1 on the
first wrong byte or error.

--graph: the same iteration, with every input read from pinned host buffers and every result
copied into pinned host buffers by the device, is run eagerly on a side stream for the first
WARMUP iterations (as torch's documentation requires before a capture), captured once with
``torch.cuda.graph`` and replayed with ``g.replay()`` for the others, the host filling the inputs
before and checking the outputs after each replay. A capture may not synchronise or free what
the graph uses, so the iteration's tensors stay alive until the end: with torch's caching
allocator they live in the graph's private memory pool and the capture is in torch's default
("global") mode; without it (PYTORCH_NO_CUDA_MEMORY_CACHING=1, or a pluggable allocator) each
tensor is a cudaMalloc of its own, which a global capture forbids, so the capture is "relaxed".
Prints graph_capture=unsupported and exits 3 when torch cannot begin a capture on this device:
torch 2.10's capture_begin launches a kernel (fill_ of its CUDA generator's graph seed and
offset), which the shim cannot run (torch ships no PTX); torch 2.15's launches none.

Usage: python torch_workload.py [--iters N] [--snapshot FILE.pickle] [--pluggable] [--graph]
(--pluggable: torch's allocations go through ``itermem.torch.use(mode="pool")`` of the itermem
wheel installed in this Python)
"""

import argparse
import os
import pickle
import sys

import torch

# Activation sizes in elements, mixed: float32 of 4 KiB to 3 MiB, odd sizes included.
ACTIVATIONS = [1024, 262144, 65537, 786432, 3000, 524288, 131071]
WEIGHTS = [262144, 131072, 1024]
BATCH = 393216
# Eager iterations before a capture (--graph), on a side stream.
WARMUP = 3


def pattern(iteration, role, index, numel):
    """What a host tensor holds: a deterministic function of its name, from a seeded generator."""
    generator = torch.Generator().manual_seed(iteration * 1000 + role * 100 + index)
    return torch.randint(-(2**24), 2**24, (numel,), generator=generator, dtype=torch.int32).to(
        torch.float32
    )


class Checker:
    """Copies device tensors back into pinned memory and compares them once the device is done."""

    def __init__(self):
        self.pending = []
        self.tensors = 0
        self.bytes = 0

    def expect(self, name, device_tensor, expected):
        host = torch.empty(device_tensor.shape, dtype=device_tensor.dtype, pin_memory=True)
        host.copy_(device_tensor, non_blocking=True)
        self.pending.append((name, host, expected))

    def expect_host(self, name, host, expected):
        """Compares pinned memory the device writes (a graph's output) at the next check."""
        self.pending.append((name, host, expected))

    def check(self):
        torch.cuda.synchronize()
        for name, host, expected in self.pending:
            if not torch.equal(host, expected):
                wrong = (host != expected).nonzero()[0].item()
                raise SystemExit(
                    f"torch_workload: {name}: element {wrong} is {host[wrong].item()}, "
                    f"expected {expected[wrong].item()}"
                )
            self.tensors += 1
            self.bytes += host.numel() * host.element_size()
        self.pending.clear()


def graph_step(device, weights, inputs, outputs, side):
    """One iteration on the current stream, its inputs read from and its results written to
    pinned host memory by the device: nothing here synchronises, frees or touches the host's
    copy of a tensor, so it can be captured. Returns the tensors it made (the caller keeps them
    while the device may still use them)."""
    stream = torch.cuda.current_stream()
    batch = torch.empty(BATCH, dtype=torch.float32, device=device)
    batch.copy_(inputs["batch"], non_blocking=True)
    outputs["batch"].copy_(batch, non_blocking=True)
    made = [batch]
    activations = []
    for i, numel in enumerate(ACTIVATIONS):
        activation = torch.empty(numel, dtype=torch.float32, device=device)
        activation.copy_(inputs["activations"][i], non_blocking=True)
        weight = weights[i % len(weights)]
        head = min(numel, weight.numel()) // 2
        activation[:head].copy_(weight[:head])
        activations.append(activation)
    # Backward on the side stream, forked from and joined to the stream by events.
    side.wait_stream(stream)
    for i in reversed(range(len(activations))):
        activation = activations[i]
        with torch.cuda.stream(side):
            gradient = torch.empty_like(activation)
            gradient.copy_(activation, non_blocking=True)
            done = torch.cuda.Event()
            done.record(side)
        stream.wait_event(done)
        outputs["activations"][i].copy_(activation, non_blocking=True)
        outputs["gradients"][i].copy_(gradient, non_blocking=True)
        made += [activation, gradient]
    for weight, host in zip(weights, inputs["weights"]):
        weight.copy_(host, non_blocking=True)
    return made


def run_graph(args, device, weights, host_weights, checker, pluggable):
    """--graph: WARMUP eager iterations on a side stream, one capture, replays. Returns the
    device tensors made, the checks expected, the weights' host copy and the graph."""
    pinned = lambda numel: torch.empty(numel, dtype=torch.float32, pin_memory=True)  # noqa: E731
    inputs = {
        "batch": pinned(BATCH),
        "activations": [pinned(n) for n in ACTIVATIONS],
        "weights": [pinned(n) for n in WEIGHTS],
    }
    outputs = {
        "batch": pinned(BATCH),
        "activations": [pinned(n) for n in ACTIVATIONS],
        "gradients": [pinned(n) for n in ACTIVATIONS],
    }
    uncached = pluggable or os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1"
    side = torch.cuda.Stream()
    device_tensors = 0
    state = {"host_weights": host_weights}

    def fill(iteration):
        """Writes iteration's inputs; returns what its outputs must hold."""
        inputs["batch"].copy_(pattern(iteration, 1, 0, BATCH))
        expected = {"batch": pattern(iteration, 1, 0, BATCH), "activations": []}
        for i, numel in enumerate(ACTIVATIONS):
            activation = pattern(iteration, 2, i, numel)
            inputs["activations"][i].copy_(activation)
            head = min(numel, WEIGHTS[i % len(WEIGHTS)]) // 2
            activation[:head] = state["host_weights"][i % len(WEIGHTS)][:head]
            expected["activations"].append(activation)
        state["host_weights"] = [pattern(iteration + 1, 0, i, n) for i, n in enumerate(WEIGHTS)]
        for host, new in zip(inputs["weights"], state["host_weights"]):
            host.copy_(new)
        return expected

    def check(iteration, expected):
        checker.expect_host(f"iteration {iteration} batch", outputs["batch"], expected["batch"])
        for i, activation in enumerate(expected["activations"]):
            for role in ("activations", "gradients"):
                checker.expect_host(
                    f"iteration {iteration} {role[:-1]} {i}", outputs[role][i], activation
                )
        checker.check()  # synchronises first

    # Warm-up, eager, on a side stream.
    warmup = torch.cuda.Stream()
    warmup.wait_stream(torch.cuda.current_stream())
    warmups = min(WARMUP, args.iters)
    for iteration in range(warmups):
        expected = fill(iteration)
        with torch.cuda.stream(warmup):
            made = graph_step(device, weights, inputs, outputs, side)
        device_tensors += len(made)
        check(iteration, expected)
        del made
    torch.cuda.current_stream().wait_stream(warmup)

    graph = torch.cuda.CUDAGraph()
    began = False
    try:
        with torch.cuda.graph(graph, capture_error_mode="relaxed" if uncached else "global"):
            began = True
            kept = graph_step(device, weights, inputs, outputs, side)
    except torch.AcceleratorError as error:
        # Only a kernel launched by torch.cuda.graph's own entry (capture_begin) means that
        # torch cannot capture here; anything else is a failure.
        if began or "cudaErrorNoKernelImageForDevice" not in str(error):
            raise
        print(
            f"graph_capture=unsupported: torch {torch.__version__}'s capture_begin launches "
            "a kernel"
        )
        sys.exit(3)
    device_tensors += len(kept)
    if not uncached:
        del kept  # the graph's private pool keeps their memory for the replays
    for iteration in range(warmups, args.iters):
        expected = fill(iteration)
        graph.replay()
        check(iteration, expected)
    torch.cuda.synchronize()
    print(f"graph_replays={args.iters - warmups}")
    checks = 15 * args.iters
    return device_tensors, checks, state["host_weights"], graph


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--snapshot", help="dump torch.cuda.memory._snapshot() here (pickle)")
    parser.add_argument(
        "--pluggable",
        action="store_true",
        help="route torch's allocations through itermem.torch.use() (the installed wheel), pool mode",
    )
    parser.add_argument(
        "--graph",
        action="store_true",
        help="capture one iteration with torch.cuda.graph and replay it (see the module's doc)",
    )
    args = parser.parse_args()

    if args.pluggable:
        import itermem.torch

        itermem.torch.use(mode="pool")
    if not torch.cuda.is_available():
        raise SystemExit("torch_workload: torch.cuda.is_available() is False")
    device = torch.device("cuda", 0)
    if args.snapshot:
        if args.pluggable:
            raise SystemExit("torch_workload: a pluggable allocator records no history")
        torch.cuda.memory._record_memory_history(max_entries=100000)

    main_stream = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    checker = Checker()

    host_weights = [pattern(0, 0, i, n) for i, n in enumerate(WEIGHTS)]
    weights = [w.pin_memory().to(device, non_blocking=True) for w in host_weights]
    device_tensors = len(weights)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph = None
    if args.graph:
        made, checks, host_weights, graph = run_graph(
            args, device, weights, host_weights, checker, args.pluggable
        )
        device_tensors += made
        checks_expected = checks + len(weights)
    for iteration in range(0 if graph is None else args.iters, args.iters):
        batch_host = pattern(iteration, 1, 0, BATCH)
        batch = batch_host.pin_memory().to(device, non_blocking=True)
        device_tensors += 1
        checker.expect(f"iteration {iteration} batch", batch, batch_host)

        # Forward: each activation is uploaded, then a slice of a weight is copied over its head.
        activations = []
        for i, numel in enumerate(ACTIVATIONS):
            expected = pattern(iteration, 2, i, numel)
            activation = torch.empty(numel, dtype=torch.float32, device=device)
            device_tensors += 1
            activation.copy_(expected.pin_memory(), non_blocking=True)
            weight = weights[i % len(weights)]
            head = min(numel, weight.numel()) // 2
            activation[:head].copy_(weight[:head])
            expected[:head] = host_weights[i % len(weights)][:head]
            activations.append((activation, expected))

        # Backward, last layer first: each gradient is a device-to-device copy of its
        # activation on a side stream, ordered with events; both are checked, then freed, so
        # the first activations stay idle on the device from the forward to the end.
        side.wait_stream(main_stream)
        for i in reversed(range(len(activations))):
            activation, expected = activations.pop()
            with torch.cuda.stream(side):
                gradient = torch.empty_like(activation)
                device_tensors += 1
                gradient.copy_(activation, non_blocking=True)
                activation.record_stream(side)
                done = torch.cuda.Event()
                done.record(side)
            main_stream.wait_event(done)
            gradient.record_stream(main_stream)
            checker.expect(f"iteration {iteration} activation {i}", activation, expected)
            checker.expect(f"iteration {iteration} gradient {i}", gradient, expected)
            # Checked before the frees: a pluggable allocator ignores record_stream and frees
            # on the allocating stream, so a tensor freed while another stream still reads it
            # could be reused (the shim poisons it) before that read.
            checker.check()
            del activation, gradient

        # Optimizer step: the weights are refreshed from the host.
        host_weights = [pattern(iteration + 1, 0, i, n) for i, n in enumerate(WEIGHTS)]
        for weight, host in zip(weights, host_weights):
            weight.copy_(host.pin_memory(), non_blocking=True)
        checker.check()
        del batch
    end.record()
    torch.cuda.synchronize()
    for i, (weight, host) in enumerate(zip(weights, host_weights)):
        checker.expect(f"weight {i}", weight, host)
    checker.check()

    free, total = torch.cuda.mem_get_info()
    print(f"iterations={args.iters}")
    print(f"device_tensors={device_tensors}")
    print(f"tensors_checked={checker.tensors}")
    if graph is not None:
        print(f"checks_expected={checks_expected}")
    print(f"bytes_checked={checker.bytes}")
    print(f"device_free_bytes={free} device_total_bytes={total}")
    print(f"loop_ms={start.elapsed_time(end):.1f}")
    if not args.pluggable:  # a pluggable allocator keeps no statistics (torch raises)
        stats = torch.cuda.memory_stats()
        print(f"segments={stats.get('segment.all.allocated', 0)}")
        print(f"torch_peak_allocated_bytes={torch.cuda.max_memory_allocated()}")
        print(f"torch_peak_reserved_bytes={torch.cuda.max_memory_reserved()}")
    if args.snapshot:
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        with open(args.snapshot, "wb") as out:
            pickle.dump(snapshot, out)
        print(f"snapshot_segments={len(snapshot['segments'])}")
    print("workload ok")


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # one line, no traceback: torch-check prints it per case
        print(f"torch_workload: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
