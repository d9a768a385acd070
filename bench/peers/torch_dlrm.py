#!/usr/bin/python3
"""PyTorch peer of `shadowsync train`: the same DLRM-small model, data, hashing,
initialisation, optimiser and metrics, written the way a competent PyTorch user
would, so bench/trainer.sh and bench/quality.sh can compare against it.

Run with Debian's interpreter (/usr/bin/python3, python3-torch 1.13 on
OpenBLAS). Everything up to the first training step (parsing, hashing, batch
tensors, model and optimiser state) happens before the timer starts; the timer
covers the training loop only. See bench/peers/README.md.

  /usr/bin/python3 bench/peers/torch_dlrm.py --data train.tsv --eval-data eval.tsv \
      --threads 1 --batch-size 512 --report-json out.json
"""

import argparse
import gzip
import json
import math
import os
import sys
import time

NUM_DENSE = 13
NUM_SPARSE = 26
NUM_FIELDS = 1 + NUM_DENSE + NUM_SPARSE
MISSING_ID = 1 << 32  # id of an empty categorical field (common/example.h kMissingId)
PROB_EPS = 1e-7       # common/eval_metrics.h kProbEpsilon


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", required=True, help="training TSV (Criteo layout; .gz accepted)")
    p.add_argument("--eval-data", help="evaluation TSV; default: the tail split off --data")
    p.add_argument("--train-fraction", type=float, default=None,
                   help="without --eval-data: train on the first F of --data's examples, "
                        "evaluate on the rest")
    p.add_argument("--eval-fraction", type=float, default=None,
                   help="without --eval-data: evaluate on the last F of --data (= 1 - train-fraction)")
    p.add_argument("--max-examples", type=int, default=-1, help="cap on training examples; -1 = all")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--optimizer", choices=["adagrad", "sgd"], default="adagrad")
    p.add_argument("--lr-warmup-steps", type=int, default=100,
                   help="the dense learning rate rises linearly over the first steps, as "
                        "shadowsync's trainer.lrWarmupSteps (0: none)")
    p.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads (and OpenBLAS)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--hash-buckets", type=int, default=1_000_000, help="rows per embedding table")
    p.add_argument("--embedding-dim", type=int, default=16)
    p.add_argument("--bottom-mlp", default="512,256,64",
                   help="bottom MLP hidden widths; a final layer of --embedding-dim is appended")
    p.add_argument("--top-mlp", default="512,256",
                   help="top MLP hidden widths; a final layer of width 1 (the logit) is appended")
    p.add_argument("--interaction", choices=["dot", "dcn"], default="dot",
                   help="dot: DLRM's pairwise dots; dcn: DCN-v2 low-rank cross layers "
                        "(TorchRec's LowRankCrossNet, as in DLRM_DCN)")
    p.add_argument("--dcn-layers", type=int, default=3)
    p.add_argument("--dcn-low-rank", type=int, default=512)
    p.add_argument("--emb-impl", choices=["manual", "fused", "tables"], default="manual",
                   help="embedding layout/update: 'fused' = one EmbeddingBag over all 26 tables "
                        "(row offsets) + sparse torch.optim; 'tables' = 26 EmbeddingBags as in the "
                        "DLRM reference + sparse torch.optim; 'manual' = index_select + hand-written "
                        "coalesced sparse update. All three compute the same thing.")
    p.add_argument("--eval-batch-size", type=int, default=16384)
    p.add_argument("--bf16", action="store_true",
                   help="MLPs under torch.autocast(cpu, bfloat16): bf16 GEMMs, fp32 weights and "
                        "optimizer (shadowsync's --dense-precision bf16)")
    p.add_argument("--report-json", help="write the result JSON here")
    p.add_argument("--preload", action="store_true",
                   help="accepted for symmetry with `shadowsync train`; the peer always preloads")
    p.add_argument("--profile", type=int, default=0, metavar="STEPS",
                   help="after training, profile STEPS extra steps and print the op table (stderr)")
    p.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    p.add_argument("--inference-seconds", type=float, default=0, metavar="S",
                   help="instead of training, score --data's batches in turn for S seconds "
                        "under torch.inference_mode (the in-process floor of a server built on "
                        "this model; bench/serve.sh)")
    args = p.parse_args(argv)
    if args.threads < 1 or args.batch_size < 1 or args.hash_buckets < 1:
        p.error("--threads, --batch-size and --hash-buckets must be positive")
    if args.train_fraction is not None and args.eval_fraction is not None and \
            abs(args.train_fraction + args.eval_fraction - 1) > 1e-9:
        p.error("--train-fraction and --eval-fraction must add up to 1")
    if args.eval_fraction is not None:
        args.train_fraction = 1.0 - args.eval_fraction
    if args.train_fraction is not None and not 0 < args.train_fraction <= 1:
        p.error("--train-fraction must be in (0, 1]")
    return args


# The thread count must reach OpenBLAS (pthread build: its own pool, sized from the
# environment when the library loads, not by torch.set_num_threads) and OpenMP
# before torch is imported.
_ARGS = parse_args(sys.argv[1:])
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(_ARGS.threads)
if _ARGS.threads > 1:
    # Two busy-waiting pools (torch's OpenMP for element-wise ops, OpenBLAS's
    # pthreads for GEMMs) fight over the cores: with the defaults, 2 threads ran
    # 3-10x slower than 1 on a 2-core machine. Short spins fix it (measured; see
    # README.md). Values already in the environment win.
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

# numpy too: Debian's numpy loads OpenBLAS, whose pool is sized on loading. Imported
# above the environment, it gave the "1-thread" peer a second OpenBLAS thread doing
# half its GEMM work (two threads at 100% in top; 26k examples/s, 18k pinned).
import numpy as np  # noqa: E402
import torch  # noqa: E402  (after the thread environment is set)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def log(msg):
    if not _ARGS.quiet:
        print(f"[torch_dlrm] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- hashing
# common/hash.h, vectorised over uint64 (numpy wraps mod 2^64 like C++).
_U = np.uint64


def mix64(x):
    with np.errstate(over="ignore"):
        x = x + _U(0x9E3779B97F4A7C15)
        x = (x ^ (x >> _U(30))) * _U(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U(27))) * _U(0x94D049BB133111EB)
        return x ^ (x >> _U(31))


_TABLE_SALT = mix64(np.arange(NUM_SPARSE, dtype=np.uint64) + _U(0x5AD05EED00000000))


def hash_ids(raw, buckets):
    """raw: (n, 26) uint64 ids -> (n, 26) int64 rows, HashId(t, id) % buckets."""
    return (mix64(raw ^ _TABLE_SALT[None, :]) % _U(buckets)).astype(np.int64)


# --------------------------------------------------------------------------- parsing
_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def _parse_block(buf):
    """Parses a uint8 array of whole lines (each ending in '\\n'). Returns
    (labels f32 (n,), dense f32 (n,13), raw ids u64 (n,26), malformed count).
    Malformed lines (wrong field count, bad label/number/hex) are skipped, like
    the C++ reader does."""
    ends = np.flatnonzero(buf == 10)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    # Tolerate CRLF.
    cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13)
    ends = ends - cr
    nonempty = ends > starts
    tabs = np.flatnonzero(buf == 9)
    line_of_tab = np.searchsorted(ends, tabs)  # tab at ends[k-1] < pos < ends[k] -> line k
    ntabs = np.bincount(line_of_tab, minlength=len(ends))
    ok = nonempty & (ntabs == NUM_FIELDS - 1)
    blank = int(np.count_nonzero(~nonempty))
    tabs = tabs[ok[line_of_tab]].reshape(-1, NUM_FIELDS - 1)
    starts, ends = starts[ok], ends[ok]
    n = len(starts)
    fs = np.empty((n, NUM_FIELDS), dtype=np.int64)
    fe = np.empty((n, NUM_FIELDS), dtype=np.int64)
    fs[:, 0] = starts
    fs[:, 1:] = tabs + 1
    fe[:, :-1] = tabs
    fe[:, -1] = ends
    flen = fe - fs
    bad = np.zeros(n, dtype=bool)
    last = len(buf) - 1

    # label: "0" or "1"
    lab = buf[fs[:, 0]].astype(np.int64) - 48
    bad |= (flen[:, 0] != 1) | (lab < 0) | (lab > 1)

    # integers: optional '-', decimal digits; f = log(1 + max(x, 0)), empty -> 0
    s, ln = fs[:, 1:1 + NUM_DENSE], flen[:, 1:1 + NUM_DENSE]
    neg = (ln > 0) & (buf[np.minimum(s, last)] == 45)
    s = s + neg
    nd = ln - neg
    bad |= (neg & (nd == 0)).any(axis=1) | (nd > 18).any(axis=1)
    val = np.zeros(s.shape, dtype=np.int64)
    for k in range(int(nd.max(initial=0))):
        m = k < nd
        d = buf[np.minimum(s + k, last)].astype(np.int64) - 48
        bad |= (m & ((d < 0) | (d > 9))).any(axis=1)
        val = np.where(m, val * 10 + d, val)
    val = np.where(neg, -val, val)
    dense = np.log1p(np.maximum(val, 0).astype(np.float64)).astype(np.float32)

    # categoricals: hex digits (32-bit), empty -> 1 << 32
    s, ln = fs[:, 1 + NUM_DENSE:], flen[:, 1 + NUM_DENSE:]
    bad |= (ln > 8).any(axis=1)
    raw = np.zeros(s.shape, dtype=np.uint64)
    for k in range(int(ln.max(initial=0))):
        m = k < ln
        d = _HEX[buf[np.minimum(s + k, last)]]
        bad |= (m & (d == 255)).any(axis=1)
        raw = np.where(m, (raw << _U(4)) | d.astype(np.uint64), raw)
    raw[ln == 0] = _U(MISSING_ID)

    good = ~bad
    malformed = int(len(ok) - blank - n) + int(np.count_nonzero(bad))
    return lab[good].astype(np.float32), dense[good], raw[good], malformed


def read_criteo(path, max_lines=-1, chunk_bytes=64 << 20):
    """Reads a Criteo TSV (plain or gzip) in file order into numpy arrays."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    opener = gzip.open if gz else open
    parts, malformed, total = [], 0, 0
    carry = b""
    with opener(path, "rb") as f:
        while max_lines < 0 or total < max_lines:
            chunk = f.read(chunk_bytes)
            eof = not chunk
            data = carry + chunk
            if eof:
                if not data:
                    break
                if not data.endswith(b"\n"):
                    data += b"\n"
                carry = b""
            else:
                cut = data.rfind(b"\n") + 1
                data, carry = data[:cut], data[cut:]
                if not data:
                    continue
            lab, dense, raw, bad = _parse_block(np.frombuffer(data, dtype=np.uint8))
            malformed += bad
            parts.append((lab, dense, raw))
            total += len(lab)
            if eof:
                break
    if not parts:
        labels = np.zeros(0, np.float32)
        dense = np.zeros((0, NUM_DENSE), np.float32)
        raw = np.zeros((0, NUM_SPARSE), np.uint64)
    else:
        labels = np.concatenate([p[0] for p in parts])
        dense = np.concatenate([p[1] for p in parts])
        raw = np.concatenate([p[2] for p in parts])
    if max_lines >= 0:
        labels, dense, raw = labels[:max_lines], dense[:max_lines], raw[:max_lines]
    if malformed:
        log(f"{path}: skipped {malformed} malformed lines")
    return labels, dense, raw


# --------------------------------------------------------------------------- model
class PairwiseDots(torch.autograd.Function):
    """Z (B, n, d) -> the dots Z_i . Z_j for the flattened indices `pairs` of
    Z Z^T. Same values as bmm + index_select under autograd, but the backward is
    one bmm, dZ = (G + G^T) Z with G the scattered output gradient, instead of
    autograd's two bmms and an index_add (bmm on CPU is a loop of tiny GEMMs)."""

    @staticmethod
    def forward(ctx, z, pairs):
        # fp32 even under --bf16, as in shadowsync, whose bf16 covers the MLP GEMMs only.
        with torch.autocast("cpu", enabled=False):
            z = z.float()
            ctx.save_for_backward(z, pairs)
            return torch.bmm(z, z.transpose(1, 2)).flatten(1).index_select(1, pairs)

    @staticmethod
    def backward(ctx, grad):
        z, pairs = ctx.saved_tensors
        grad = grad.float()
        b, n, _ = z.shape
        g = torch.zeros(b, n * n, dtype=grad.dtype).index_copy_(1, pairs, grad).view(b, n, n)
        return torch.bmm(g + g.transpose(1, 2), z), None


def mlp(sizes, relu_last):
    layers = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        fan_in, fan_out = sizes[i], sizes[i + 1]
        with torch.no_grad():  # the DLRM reference's initialisation
            lin.weight.normal_(0.0, math.sqrt(2.0 / (fan_in + fan_out)))
            lin.bias.normal_(0.0, math.sqrt(1.0 / fan_out))
        layers.append(lin)
        if i < len(sizes) - 2 or relu_last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class LowRankCrossNet(nn.Module):
    """DCN-v2's low-rank cross layers, TorchRec's formula and initialisation:
    x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l; W, V Xavier normal, b zero."""

    def __init__(self, n, layers, rank):
        super().__init__()
        self.W = nn.ParameterList(
            nn.Parameter(nn.init.xavier_normal_(torch.empty(n, rank))) for _ in range(layers))
        self.V = nn.ParameterList(
            nn.Parameter(nn.init.xavier_normal_(torch.empty(rank, n))) for _ in range(layers))
        self.b = nn.ParameterList(nn.Parameter(torch.zeros(n)) for _ in range(layers))

    def forward(self, x0):
        x = x0
        for w, v, b in zip(self.W, self.V, self.b):
            x = x0 * (nn.functional.linear(nn.functional.linear(x, v), w) + b) + x
        return x


class DLRM(nn.Module):
    """Bottom MLP (ReLU after every layer) -> pairwise dots of [bottom, e_0..e_25]
    (i > j, no self-dots) -> concat after bottom -> top MLP -> logit. With
    interaction dcn the top MLP reads the cross layers' output over
    [bottom, e_0..e_25] flattened instead (TorchRec's DLRM_DCN)."""

    def __init__(self, bottom, top, dim, buckets, impl, interaction="dot", dcn_layers=3,
                 dcn_low_rank=512):
        super().__init__()
        self.impl, self.dim, self.buckets = impl, dim, buckets
        self.bot = mlp([NUM_DENSE] + bottom + [dim], relu_last=True)
        n = NUM_SPARSE + 1
        num_int = n * (n - 1) // 2
        # Cross layers are built after both MLPs, so a dot model's draws from
        # the seed are the same as before they existed.
        top_in = n * dim if interaction == "dcn" else dim + num_int
        self.top = mlp([top_in] + top + [1], relu_last=False)
        self.cross = (LowRankCrossNet(n * dim, dcn_layers, dcn_low_rank)
                      if interaction == "dcn" else None)
        li, lj = torch.tril_indices(n, n, offset=-1)  # (1,0), (2,0), (2,1), ... as in DLRM
        # Z Z^T flattened, the i > j entries picked with one index_select (see PairwiseDots).
        self.register_buffer("pairs", li * n + lj, persistent=False)
        bound = math.sqrt(1.0 / buckets)
        if impl == "tables":
            self.emb = nn.ModuleList(
                nn.EmbeddingBag(buckets, dim, mode="sum", sparse=True) for _ in range(NUM_SPARSE))
            for e in self.emb:
                nn.init.uniform_(e.weight, -bound, bound)
        elif impl == "fused":
            # All 26 tables in one EmbeddingBag; table t owns rows [t*buckets, (t+1)*buckets).
            self.emb = nn.EmbeddingBag(NUM_SPARSE * buckets, dim, mode="sum", sparse=True)
            nn.init.uniform_(self.emb.weight, -bound, bound)
        else:  # manual: plain tensor, gathered rows are the autograd leaves
            self.emb_weight = torch.empty(NUM_SPARSE * buckets, dim).uniform_(-bound, bound)
            self.rows = None

    def embed(self, idx):
        """idx: 'fused'/'manual': (B, 26) int64 rows with table offsets;
        'tables': (26, B) int64 rows per table. Returns (B, 26, dim)."""
        if self.impl == "tables":
            b = idx.shape[1]
            offsets = torch.arange(b)
            return torch.stack([e(idx[t], offsets) for t, e in enumerate(self.emb)], dim=1)
        if self.impl == "fused":
            b = idx.shape[0]
            flat = idx.view(-1)
            offsets = torch.arange(0, flat.numel(), dtype=torch.int64)
            return self.emb(flat, offsets).view(b, NUM_SPARSE, self.dim)
        rows = self.emb_weight.index_select(0, idx.view(-1))
        if torch.is_grad_enabled():
            self.rows = rows.requires_grad_()  # ManualSparseOptimizer reads rows.grad
        return rows.view(idx.shape[0], NUM_SPARSE, self.dim)

    def forward(self, dense, idx):
        x = self.bot(dense)
        z = torch.cat([x.unsqueeze(1), self.embed(idx)], dim=1)  # (B, 27, dim)
        if self.cross is not None:
            return self.top(self.cross(z.flatten(1))).squeeze(1)
        r = torch.cat([x, PairwiseDots.apply(z, self.pairs)], dim=1)
        return self.top(r).squeeze(1)

    def sparse_params(self):
        if self.impl == "tables":
            return [e.weight for e in self.emb]
        if self.impl == "fused":
            return [self.emb.weight]
        return []

    def dense_params(self):
        cross = list(self.cross.parameters()) if self.cross is not None else []
        return list(self.bot.parameters()) + cross + list(self.top.parameters())


class ManualSparseOptimizer:
    """The update torch.optim.Adagrad / SGD apply to a sparse embedding gradient
    (duplicate rows of the batch coalesced by summing, then the element-wise rule
    on each touched row), done with index ops instead of sparse tensors.
    Duplicates are found without sorting: every occurrence writes its position
    into a per-row scratch slot, one write wins, and the winners are the unique
    rows (torch.unique sorts, and costs more than the rest of the update)."""

    def __init__(self, model, kind, lr, eps=1e-10):
        self.m, self.kind, self.lr, self.eps = model, kind, lr, eps
        w = model.emb_weight
        self.state = torch.zeros_like(w) if kind == "adagrad" else None
        self.mark = torch.zeros(w.shape[0], dtype=torch.int64) if kind == "adagrad" else None
        self.pos = None

    def unique(self, flat):
        """(uniq, inv) with uniq[inv] == flat, uniq without repeats, in O(n)."""
        n = flat.numel()
        if self.pos is None or self.pos.numel() != n:
            self.pos = torch.arange(n)
        self.mark.index_put_((flat,), self.pos)    # one occurrence per row wins
        rep = self.mark.index_select(0, flat)      # the winner of each occurrence
        is_rep = rep == self.pos
        rank = torch.cumsum(is_rep, 0).sub_(1)
        return flat[is_rep], rank.index_select(0, rep)

    def step(self, idx):
        flat = idx.view(-1)
        g = self.m.rows.grad
        w = self.m.emb_weight
        if self.kind == "sgd":
            w.index_put_((flat,), g.mul_(-self.lr), accumulate=True)
            return
        uniq, inv = self.unique(flat)
        gs = torch.zeros(uniq.numel(), g.shape[1]).index_put_((inv,), g, accumulate=True)
        s = self.state.index_select(0, uniq).addcmul_(gs, gs)
        self.state.index_put_((uniq,), s)
        w.index_put_((uniq,), gs.div_(s.sqrt_().add_(self.eps)).mul_(-self.lr), accumulate=True)


def make_optimizers(model, args):
    dense = model.dense_params()
    if args.optimizer == "adagrad":
        opts = [torch.optim.Adagrad(dense, lr=args.lr, eps=1e-10, foreach=True)]
        if model.impl != "manual":
            opts.append(torch.optim.Adagrad(model.sparse_params(), lr=args.lr, eps=1e-10))
    else:
        opts = [torch.optim.SGD(dense, lr=args.lr, foreach=True)]
        if model.impl != "manual":
            opts.append(torch.optim.SGD(model.sparse_params(), lr=args.lr))
    manual = ManualSparseOptimizer(model, args.optimizer, args.lr) if model.impl == "manual" else None
    # The dense optimizer's warm-up: step k (from 0) at lr * min(1, (k + 1) / W).
    w = args.lr_warmup_steps
    warmup = (torch.optim.lr_scheduler.LambdaLR(opts[0], lambda k: min(1.0, (k + 1) / w))
              if w > 0 else None)
    return opts, manual, warmup


# --------------------------------------------------------------------------- metrics
# common/eval_metrics.cc: probabilities (float32) clamped to [1e-7, 1 - 1e-7], in double.
def binary_entropy(p):
    p = min(max(p, PROB_EPS), 1 - PROB_EPS)
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def logloss(probs, labels):
    p = np.clip(probs.astype(np.float64), PROB_EPS, 1 - PROB_EPS)
    y = labels.astype(np.float64)
    return float(np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p))))


def normalized_entropy(probs, labels):
    if len(labels) == 0:
        return float("nan")
    ctr = float(np.mean(labels, dtype=np.float64))
    if ctr <= 0 or ctr >= 1:
        return float("nan")
    return logloss(probs, labels) / binary_entropy(ctr)


def calibration(probs, labels):
    """Mean prediction over the observed rate (common/eval_metrics.cc): 1 is calibrated."""
    positives = float(np.sum(labels, dtype=np.float64))
    return float(np.sum(probs, dtype=np.float64)) / positives if positives > 0 else float("nan")


def auc(probs, labels):
    """Exact ROC AUC (Mann-Whitney U); tied scores share their mean rank."""
    n = len(probs)
    order = np.argsort(probs, kind="stable")
    sp = probs[order]
    sy = labels[order].astype(np.float64)
    # boundaries of tie groups
    new = np.empty(n, dtype=bool)
    new[:1] = True
    new[1:] = sp[1:] != sp[:-1]
    gstart = np.flatnonzero(new)
    gend = np.append(gstart[1:], n)
    mean_rank = 0.5 * (gstart + 1 + gend)  # ranks gstart+1 .. gend
    pos_in_group = np.add.reduceat(sy, gstart) if n else np.zeros(0)
    positives = float(sy.sum())
    negatives = n - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    rank_sum = float(np.dot(pos_in_group, mean_rank))
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


# --------------------------------------------------------------------------- main
def to_batches(labels, dense, rows, bs, impl, buckets):
    """Pre-built per-batch tensors (views of contiguous blocks)."""
    y = torch.from_numpy(labels)
    x = torch.from_numpy(dense)
    if impl == "tables":
        idx = torch.from_numpy(np.ascontiguousarray(rows.T))  # (26, N): per-table rows contiguous
        # (26, B) slices of a (26, N) tensor are strided; make each batch contiguous.
        ib = [idx[:, i:i + bs].contiguous() for i in range(0, len(labels), bs)]
    else:
        offs = (np.arange(NUM_SPARSE, dtype=np.int64) * buckets)[None, :]
        idx = torch.from_numpy(rows + offs)
        ib = list(torch.split(idx, bs))
    return list(zip(torch.split(x, bs), ib, torch.split(y, bs)))


def evaluate(model, labels, dense, rows, args):
    model.eval()
    out = []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        for x, i, _ in to_batches(labels, dense, rows, args.eval_batch_size, model.impl,
                                  model.buckets):
            out.append(torch.sigmoid(model(x, i).float()))
    model.train()
    probs = torch.cat(out).numpy() if out else np.zeros(0, np.float32)
    return {"eval_ne": normalized_entropy(probs, labels), "eval_auc": auc(probs, labels),
            "eval_logloss": logloss(probs, labels) if len(labels) else float("nan"),
            "eval_examples": len(labels), "eval_calibration": calibration(probs, labels)}


def train_step(model, opts, manual, x, i, y, bf16=False):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(x, i).float()
    loss = F.binary_cross_entropy_with_logits(logits, y)
    for o in opts:
        o.zero_grad(set_to_none=True)
    loss.backward()
    for o in opts:
        o.step()
    if manual is not None:
        manual.step(i)
    return logits


def main(args):
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    torch.manual_seed(args.seed)

    t0 = time.perf_counter()
    labels, dense, raw = read_criteo(args.data)
    if args.eval_data:
        ev = read_criteo(args.eval_data)
    elif args.train_fraction is not None and args.train_fraction < 1:
        cut = int(len(labels) * args.train_fraction)
        ev = (labels[cut:], dense[cut:], raw[cut:])
        labels, dense, raw = labels[:cut], dense[:cut], raw[:cut]
    else:
        ev = None
    if args.max_examples >= 0:
        labels, dense, raw = labels[:args.max_examples], dense[:args.max_examples], raw[:args.max_examples]
    rows = hash_ids(raw, args.hash_buckets)
    ev_rows = hash_ids(ev[2], args.hash_buckets) if ev is not None else None
    batches = to_batches(labels, dense, rows, args.batch_size, args.emb_impl, args.hash_buckets)
    log(f"loaded {len(labels)} training / {0 if ev is None else len(ev[0])} eval examples "
        f"in {time.perf_counter() - t0:.1f}s")

    bottom = [int(v) for v in args.bottom_mlp.split(",") if v]
    top = [int(v) for v in args.top_mlp.split(",") if v]
    model = DLRM(bottom, top, args.embedding_dim, args.hash_buckets, args.emb_impl,
                 args.interaction, args.dcn_layers, args.dcn_low_rank)
    if args.inference_seconds > 0:
        return score_throughput(model, batches, args)
    opts, manual, warmup = make_optimizers(model, args)
    n = len(labels)
    train_logits = torch.empty(n)

    log(f"training: {len(batches)} batches of {args.batch_size}, {args.threads} thread(s), "
        f"{args.optimizer} lr={args.lr} (warm-up {args.lr_warmup_steps} steps), "
        f"emb-impl={args.emb_impl}")
    start = time.perf_counter()
    cpu_start = time.process_time()
    pos = 0
    for x, i, y in batches:
        logits = train_step(model, opts, manual, x, i, y, args.bf16)
        if warmup is not None:
            warmup.step()
        b = y.shape[0]
        train_logits[pos:pos + b].copy_(logits.detach())  # progressive: made before the update
        pos += b
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start

    train_probs = torch.sigmoid(train_logits).numpy()
    report = {
        "examples": n,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "examples_per_second": n / seconds if seconds > 0 else float("nan"),
        "train_ne": normalized_entropy(train_probs, labels),
        "eval_ne": float("nan"), "eval_auc": float("nan"), "eval_logloss": float("nan"),
        "threads": args.threads,
        "batch_size": args.batch_size,
    }
    if ev is not None:
        report.update(evaluate(model, ev[0], ev[1], ev_rows, args))
    report.update({"peer": "torch", "torch_version": torch.__version__, "optimizer": args.optimizer,
                   "lr": args.lr, "lr_warmup_steps": args.lr_warmup_steps, "hash_buckets": args.hash_buckets, "emb_impl": args.emb_impl,
                   "dense_precision": "bf16" if args.bf16 else "fp32"})

    if args.profile > 0:
        profile(model, opts, manual, batches, args.profile)

    write_report(args.report_json, report)
    print(f"torch_dlrm: examples={n} seconds={seconds:.3f} "
          f"examples_per_second={report['examples_per_second']:.1f} "
          f"train_ne={report['train_ne']:.5f} eval_ne={report['eval_ne']:.5f} "
          f"eval_auc={report['eval_auc']:.5f} eval_logloss={report['eval_logloss']:.5f} "
          f"threads={args.threads} batch_size={args.batch_size}", flush=True)


def write_report(path, report):
    """The report as JSON at `path` (if given), non-finite numbers as null."""
    if not path:
        return
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in report.items()}
    with open(path, "w") as f:
        json.dump(clean, f, indent=1)
        f.write("\n")


def score_throughput(model, batches, args):
    """Probabilities of --data's batches, one forward pass each, in turn for
    --inference-seconds after a warm-up pass: examples/s and per-batch p50/p99."""
    model.eval()
    latencies = []
    with torch.inference_mode():
        for x, i, _ in batches[:20]:
            torch.sigmoid(model(x, i))
        n, k = 0, 0
        start = time.perf_counter()
        cpu_start = time.process_time()
        while True:
            x, i, y = batches[k % len(batches)]
            t = time.perf_counter()
            torch.sigmoid(model(x, i))
            latencies.append(time.perf_counter() - t)
            n += y.shape[0]
            k += 1
            if time.perf_counter() - start >= args.inference_seconds:
                break
        seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    latencies.sort()
    report = {"peer": "torch", "mode": "inference", "torch_version": torch.__version__,
              "examples": n, "batches": k, "seconds": seconds, "cpu_seconds": cpu_seconds,
              "examples_per_second": n / seconds, "batch_size": args.batch_size,
              "threads": args.threads, "emb_impl": args.emb_impl,
              "p50_ms": 1e3 * latencies[len(latencies) // 2],
              "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]}
    write_report(args.report_json, report)
    print(f"torch_dlrm: inference examples={n} seconds={seconds:.3f} "
          f"examples_per_second={report['examples_per_second']:.1f} p50_ms={report['p50_ms']:.3f} "
          f"p99_ms={report['p99_ms']:.3f} threads={args.threads} batch_size={args.batch_size}",
          flush=True)


def profile(model, opts, manual, batches, steps):
    from torch.autograd import profiler
    steps = min(steps, len(batches))
    with profiler.profile() as prof:
        for x, i, y in batches[:steps]:
            train_step(model, opts, manual, x, i, y)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), file=sys.stderr)


if __name__ == "__main__":
    main(_ARGS)
