"""The scan engine's chunk scans, alone: every tile layout and direction against a float64 loop.

A chunk tile is either [rows, time] (one step per thread position, VEC = 1) or grouped,
[rows, groups, VEC] with each group's steps in memory order. ``scan_chunk_with_previous`` must
give, for every step, x and the x processed just before it, as maps of the carry into the chunk,
and ``last_step`` the x processed last; padded steps (a = 0, b = 1) pass the carry through.
``shifted_chunk`` moves a loaded tile one step later in time (GAE's and V-trace's values[t + 1]).
``claim_segment`` hands the programs of a time split their row tile and run of chunks.
"""

import itertools

import pytest
import torch
import triton
import triton.language as tl

from conftest import DEVICE
from rl_triton.kernels.scan import (
    claim_segment,
    last_step,
    load_chunk,
    per_step,
    scan_chunk,
    scan_chunk_with_previous,
    shifted_chunk,
    store_chunk,
)

ROWS = 2


@triton.jit
def chunk_scan_kernel(a_ptr, b_ptr, carry_ptr, x_ptr, previous_ptr, plain_ptr, last_ptr, seq_len,
                      BLOCK_TIME: tl.constexpr, VEC: tl.constexpr, BACKWARD: tl.constexpr):
    rows = tl.arange(0, 2).to(tl.int64)
    row_ok = rows < 2
    a = load_chunk(a_ptr, rows, row_ok, BLOCK_TIME, 0, 1, seq_len, 0.0, tl.float64, 2, BLOCK_TIME, VEC, BACKWARD)
    b = load_chunk(b_ptr, rows, row_ok, BLOCK_TIME, 0, 1, seq_len, 1.0, tl.float64, 2, BLOCK_TIME, VEC, BACKWARD)
    carry = per_step(tl.load(carry_ptr + rows), VEC)
    scan_a, scan_b, previous_a, previous_b = scan_chunk_with_previous(a, b, BACKWARD, VEC)
    x = scan_a + scan_b * carry
    store_chunk(x_ptr, rows, row_ok, BLOCK_TIME, 0, 1, seq_len, x, 2, BLOCK_TIME, VEC, BACKWARD)
    store_chunk(previous_ptr, rows, row_ok, BLOCK_TIME, 0, 1, seq_len, previous_a + previous_b * carry, 2,
                BLOCK_TIME, VEC, BACKWARD)
    plain_a, plain_b = scan_chunk(a, b, BACKWARD, VEC)
    store_chunk(plain_ptr, rows, row_ok, BLOCK_TIME, 0, 1, seq_len, plain_a + plain_b * carry, 2, BLOCK_TIME, VEC,
                BACKWARD)
    tl.store(last_ptr + rows, last_step(x, BLOCK_TIME, BACKWARD, VEC))


def loop(a, b, carry, seq_len, backward):
    """x, the x processed before each step, and the last x, by the recurrence step by step."""
    x, previous = torch.zeros_like(a), torch.zeros_like(a)
    current = carry.clone()
    for t in range(seq_len - 1, -1, -1) if backward else range(seq_len):
        previous[:, t] = current
        current = a[:, t] + b[:, t] * current
        x[:, t] = current
    return x[:, :seq_len], previous[:, :seq_len], current


@pytest.mark.parametrize("backward", [True, False], ids=["backward", "forward"])
@pytest.mark.parametrize("vec", [1, 2, 4, 8])
# rows of whole groups of up to 8 steps, as the launcher groups them: a full chunk, a chunk three
# quarters full, one group of a chunk
@pytest.mark.parametrize("block_time, seq_len", [(16, 16), (32, 24), (64, 8)])
def test_chunk_scans_match_the_loop(backward, vec, block_time, seq_len):
    gen = torch.Generator().manual_seed(block_time * 100 + seq_len * 10 + vec)
    a = torch.randn(ROWS, block_time, generator=gen, dtype=torch.float64)
    # decays in [0, 1.5), some exactly zero (an episode end)
    b = torch.rand(ROWS, block_time, generator=gen, dtype=torch.float64) * 1.5
    b[:, 3] = 0.0
    carry = torch.randn(ROWS, generator=gen, dtype=torch.float64)
    a, b, carry = a.to(DEVICE), b.to(DEVICE), carry.to(DEVICE)
    x, previous, plain = (torch.full_like(a, float("nan")) for _ in range(3))
    last = torch.full_like(carry, float("nan"))
    chunk_scan_kernel[(1,)](a, b, carry, x, previous, plain, last, seq_len, BLOCK_TIME=block_time, VEC=vec,
                            BACKWARD=backward)
    want_x, want_previous, want_last = loop(a.cpu(), b.cpu(), carry.cpu(), seq_len, backward)
    torch.testing.assert_close(x[:, :seq_len].cpu(), want_x, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(plain[:, :seq_len].cpu(), want_x, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(previous[:, :seq_len].cpu(), want_previous, rtol=1e-12, atol=1e-12)
    # padded steps carry x through unchanged, so the last step processed holds the chunk's carry out
    torch.testing.assert_close(last.cpu(), want_last, rtol=1e-12, atol=1e-12)
    # steps past seq_len are not written
    assert torch.isnan(x[:, seq_len:]).all()


@triton.jit
def shifted_chunk_kernel(x_ptr, out_ptr, row_stride, seq_len, chunk, SHIFT: tl.constexpr, BLOCK_TIME: tl.constexpr,
                         VEC: tl.constexpr, BACKWARD: tl.constexpr, FLAG: tl.constexpr):
    rows = tl.arange(0, 2).to(tl.int64)
    row_ok = rows < 2
    x = load_chunk(x_ptr, rows, row_ok, row_stride, chunk, 1, seq_len, -7.0, tl.float64, 2, BLOCK_TIME, VEC, BACKWARD,
                   FLAG=FLAG)
    y = shifted_chunk(x, x_ptr, rows, row_ok, row_stride, chunk, 1, seq_len, -7.0, tl.float64, 2, BLOCK_TIME, VEC,
                      BACKWARD, SHIFT, FLAG)
    store_chunk(out_ptr, rows, row_ok, row_stride, chunk, 1, seq_len, y, 2, BLOCK_TIME, VEC, BACKWARD)


@pytest.mark.parametrize("shift", [1, -1], ids=["later", "earlier"])
@pytest.mark.parametrize("flag", [False, True], ids=["values", "flags"])
@pytest.mark.parametrize("backward", [True, False], ids=["backward", "forward"])
@pytest.mark.parametrize("vec", [1, 2, 4, 8])
def test_shifted_chunk_is_the_tile_one_step_along(shift, flag, backward, vec):
    # three chunks of 16 steps, the last one half full: each step gets the value of the step SHIFT away
    # (GAE and V-trace take values[t + 1]); a step outside [0, seq_len) reads `other`, which as a flag
    # is set. Steps inside a group move in registers, the step past each group is loaded.
    block_time, seq_len = 16, 40
    gen = torch.Generator().manual_seed(vec * 10 + backward + 3 * (shift > 0) + 5 * flag)
    x = torch.randn(ROWS, seq_len, generator=gen, dtype=torch.float64)
    if flag:
        # flags stored as any non-zero value
        x = (x > 0.5).to(torch.float64) * torch.randint(1, 5, x.shape, generator=gen)
    source = (x != 0).to(torch.float64) if flag else x
    want = torch.full_like(x, 1.0 if flag else -7.0)
    if shift > 0:
        want[:, :-1] = source[:, 1:]
    else:
        want[:, 1:] = source[:, :-1]
    # rows a whole number of groups apart, as the launcher guarantees grouped tiles, with NaN past each end
    row_stride = 48
    stored = torch.full((ROWS, row_stride), float("nan"), dtype=torch.float64)
    stored[:, :seq_len] = x
    stored = stored.to(DEVICE)
    out = torch.full_like(stored, float("nan"))
    for chunk in range(triton.cdiv(seq_len, block_time)):
        shifted_chunk_kernel[(1,)](stored, out, row_stride, seq_len, chunk, SHIFT=shift, BLOCK_TIME=block_time,
                                   VEC=vec, BACKWARD=backward, FLAG=flag)
    torch.testing.assert_close(out[:, :seq_len].cpu(), want, rtol=0.0, atol=0.0)
    assert out[:, seq_len:].isnan().all()


@triton.jit
def claim_segment_kernel(counter_ptr, spent_ptr, spent_words, out_ptr, num_row_tiles, num_chunks, segment_chunks,
                         EVEN: tl.constexpr):
    row_tile, order, first, my_chunks = claim_segment(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks,
                                                      segment_chunks, True, EVEN)
    program = tl.program_id(0)
    tl.store(out_ptr + 4 * program, row_tile)
    tl.store(out_ptr + 4 * program + 1, order)
    tl.store(out_ptr + 4 * program + 2, first)
    tl.store(out_ptr + 4 * program + 3, my_chunks)


@pytest.mark.parametrize("even", [False, True], ids=["cut", "even"])
@pytest.mark.parametrize("num_row_tiles, num_chunks, segment_chunks",
                         [(1, 38, 10), (3, 4096, 63), (2, 64, 8), (1, 7, 1), (2, 5, 2)])
def test_segments_cover_every_chunk_once(even, num_row_tiles, num_chunks, segment_chunks):
    # segments of segment_chunks chunks, the last one shorter; even ones (Retrace's walks) as many
    # segments, of lengths that differ by one chunk at most, the longer ones first
    num_segments = triton.cdiv(num_chunks, segment_chunks)
    counter = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    out = torch.full((num_row_tiles * num_segments, 4), -1, dtype=torch.int32, device=DEVICE)
    # the programs also zero the words a launch before them left in the other workspace, and no more
    spent_words = 3 * num_segments + 5
    spent = torch.full((spent_words + 7,), 9, dtype=torch.int32, device=DEVICE)
    claim_segment_kernel[(num_row_tiles * num_segments,)](counter, spent, spent_words, out, num_row_tiles, num_chunks,
                                                          segment_chunks, EVEN=even)
    assert (spent[:spent_words] == 0).all() and (spent[spent_words:] == 9).all()
    claimed = sorted(tuple(row) for row in out.cpu().tolist())
    for row_tile in range(num_row_tiles):
        segments = [row[1:] for row in claimed if row[0] == row_tile]
        assert [order for order, _, _ in segments] == list(range(num_segments))
        # contiguous, in order, every chunk once
        assert segments[0][1] == 0
        assert all(first + length == next_first
                   for (_, first, length), (_, next_first, _) in itertools.pairwise(segments))
        assert segments[-1][1] + segments[-1][2] == num_chunks
        lengths = [length for _, _, length in segments]
        if even:
            shorter = num_chunks // num_segments
            assert lengths == sorted(lengths, reverse=True) and set(lengths) <= {shorter, shorter + 1}
        else:
            assert lengths[:-1] == [segment_chunks] * (num_segments - 1)
            assert lengths[-1] == num_chunks - (num_segments - 1) * segment_chunks
