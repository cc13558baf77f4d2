"""Train the tiny K3-speaking model from scratch (runs on one GPU in a few minutes, or on CPU
for a smoke test).

Needs only torch, transformers, safetensors and numpy (no kimik3 import: the device machine has
no pydantic). Inputs: the dataset made by ``encode_data.py`` (``dataset.npz``, ``eval.json``,
``dataset_meta.json``) and the model directory (``config.json``, ``tiktoken.model``,
``tokenizer_config.json``) for the architecture and for decoding during evaluation.

Training: ``LlamaForCausalLM`` from ``config.json``, random init, bf16 autocast on GPU, AdamW
(betas 0.9/0.95, weight decay 0.1), linear warm-up then cosine decay to 10%, batches of
length-bucketed episodes right-padded (so plain causal attention never sees padding), loss only
on assistant-generated tokens (the dataset's mask). The schedule runs on the training clock:
progress = seconds trained / training budget (``--max-minutes`` less the time kept for
evaluation and saving), so the cosine ends when the time does on any machine; a hard guard stops
the loop if the wall clock runs out anyway.

Evaluation (held-out words and file names): greedy decoding of the evaluated assistant turn (the
first one, and the one after the first tool results); a turn counts as correct when the parsed
tool calls (name and typed arguments, in order) equal the expected ones, or, for a turn without
tools, when no tool is called and the answer contains the expected text. The weights are saved
before the final evaluation, so a run that is cut short there still returns them.

Writes to ``--out``: ``config.json``, ``generation_config.json``, the bf16 weights (sharded
safetensors under ``--max-shard-size``: the device tool returns files of at most 16 MiB; join
them with ``join_weights.py``) and ``train_log.json`` (loss curve, evaluations, settings).

Usage (GPU): python3 scripts/tiny_k3/train.py --data .cache/tiny_k3/device --out $OUT
Usage (CPU smoke): python scripts/tiny_k3/train.py --data ... --out /tmp/x --smoke
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


# -- data ---------------------------------------------------------------------------------------


class Data:
    """Episodes as (header index, body ids, loss mask); headers stored once."""

    def __init__(self, path: Path) -> None:
        z = np.load(path / "dataset.npz")
        self.tokens = z["tokens"].astype(np.int64)
        self.mask = z["mask"].astype(np.bool_)
        self.offsets = z["offsets"]
        self.header = z["header"].astype(np.int64)
        ht, ho = z["header_tokens"].astype(np.int64), z["header_offsets"]
        self.headers = [ht[ho[i] : ho[i + 1]] for i in range(len(ho) - 1)]
        self.n = len(self.offsets) - 1
        self.body_len = np.diff(self.offsets)
        self.lengths = self.body_len + np.asarray([len(h) for h in self.headers])[self.header]
        assert not self.mask[self.offsets[:-1]].any(), "an episode starts with a target token"

    def batches(self, rng: np.random.Generator, batch_tokens: int) -> list[list[int]]:
        """One epoch of batches. A batch shares one header; within a header, episodes are sorted
        by length in random chunks so padding stays small; a batch holds at most
        ``batch_tokens`` padded body tokens."""
        out: list[list[int]] = []
        for h in range(len(self.headers)):
            idx_h = np.flatnonzero(self.header == h)
            order = rng.permutation(idx_h)
            per = max(1, batch_tokens // max(1, int(np.median(self.body_len))))
            chunk = per * 32
            for s in range(0, len(order), chunk):
                idx = sorted(order[s : s + chunk].tolist(), key=lambda i: self.body_len[i])
                cur: list[int] = []
                longest = 0
                for i in idx:
                    longest2 = max(longest, int(self.body_len[i]))
                    if cur and longest2 * (len(cur) + 1) > batch_tokens:
                        out.append(cur)
                        cur, longest2 = [], int(self.body_len[i])
                    cur.append(i)
                    longest = longest2
                if cur:
                    out.append(cur)
        perm = rng.permutation(len(out))
        return [out[i] for i in perm]

    def collate(self, idx: list[int], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(header [H], body ids [B, T] right-padded with ``pad``, mask [B, T])."""
        n = max(int(self.body_len[i]) for i in idx)
        ids = np.full((len(idx), n), pad, np.int64)
        mask = np.zeros((len(idx), n), np.bool_)
        for k, i in enumerate(idx):
            a, b = self.offsets[i], self.offsets[i + 1]
            ids[k, : b - a] = self.tokens[a:b]
            mask[k, : b - a] = self.mask[a:b]
        header = self.headers[self.header[idx[0]]]
        return torch.from_numpy(header), torch.from_numpy(ids), torch.from_numpy(mask)


# -- decoding and parsing (no kimik3 here) ------------------------------------------------------


class Detok:
    def __init__(self, model_dir: Path) -> None:
        self.bytes: dict[int, bytes] = {}
        for line in (model_dir / "tiktoken.model").read_text().splitlines():
            if line.strip():
                tok, rank = line.split()
                self.bytes[int(rank)] = base64.b64decode(tok)
        cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
        self.special = {int(k): v["content"] for k, v in cfg["added_tokens_decoder"].items()}
        self.id_of = {v: k for k, v in self.special.items()}

    def decode(self, ids: list[int]) -> str:
        out = b""
        for i in ids:
            out += self.bytes[i] if i in self.bytes else self.special.get(i, f"<|reserved_token_{i}|>").encode()
        return out.decode("utf-8", errors="replace")


_CALL = re.compile(r'<\|open\|>call tool="([^"]*)" index="(\d+)"<\|sep\|>(.*?)<\|close\|>call<\|sep\|>', re.S)
_ARG = re.compile(r'<\|open\|>argument key="([^"]*)" type="([^"]*)"<\|sep\|>(.*?)<\|close\|>argument<\|sep\|>', re.S)


def _unescape(s: str) -> str:
    return s.replace("&quot;", '"').replace("&amp;", "&")


def parse_turn(text: str) -> tuple[list[dict[str, Any]], str]:
    """(tool calls [{name, arguments}], response text) of one generated assistant turn."""
    calls = []
    for m in _CALL.finditer(text):
        args: dict[str, Any] = {}
        for a in _ARG.finditer(m.group(3)):
            key, typ, val = _unescape(a.group(1)), a.group(2), a.group(3)
            if typ == "string":
                args[key] = val
            else:
                try:
                    args[key] = json.loads(val)
                except ValueError:
                    args[key] = val
        calls.append({"name": _unescape(m.group(1)), "arguments": args})
    resp = re.search(r"<\|open\|>response<\|sep\|>(.*?)(?:<\|close\|>response<\|sep\|>|<\|close\|>message|$)", text, re.S)
    return calls, resp.group(1) if resp else ""


@torch.no_grad()
def evaluate(model: Any, tasks: list[dict[str, Any]], detok: Detok, device: torch.device, *,
             batch: int, max_new: int, amp: bool, deadline: float = float("inf")) -> dict[str, Any]:
    model.eval()
    eom, pad = detok.id_of["<|end_of_msg|>"], detok.id_of["[PAD]"]
    results = []
    order = sorted(range(len(tasks)), key=lambda i: len(tasks[i]["prompt_ids"]))
    for s in range(0, len(order), batch):
        chunk = [tasks[i] for i in order[s : s + batch]]
        if time.time() > deadline:
            results.extend({"kind": t["kind"], "group": f"{t.get('group', 'synthetic')}/{t.get('turn', 'first')}",
                            "ok": False, "ended": False, "text": "[not evaluated: out of time]",
                            "expected": t["expected_calls"] or t["answer_contains"]} for t in chunk)
            continue
        n = max(len(t["prompt_ids"]) for t in chunk)
        ids = torch.full((len(chunk), n), pad, dtype=torch.long)
        att = torch.zeros((len(chunk), n), dtype=torch.long)
        for k, t in enumerate(chunk):  # left padding
            p = t["prompt_ids"]
            ids[k, n - len(p) :] = torch.tensor(p)
            att[k, n - len(p) :] = 1
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            out = model.generate(
                input_ids=ids.to(device), attention_mask=att.to(device), max_new_tokens=max_new,
                do_sample=False, eos_token_id=eom, pad_token_id=pad,
            )
        for k, t in enumerate(chunk):
            gen = out[k, n:].tolist()
            if eom in gen:
                gen = gen[: gen.index(eom) + 1]
            text = detok.decode(gen)
            calls, answer = parse_turn(text)
            if t["expected_calls"]:
                ok = calls == t["expected_calls"]
            else:
                ok = not calls and all(a in answer for a in t["answer_contains"])
            results.append({"kind": t["kind"], "group": f"{t.get('group', 'synthetic')}/{t.get('turn', 'first')}",
                            "ok": ok, "ended": bool(gen) and gen[-1] == eom, "text": text,
                            "expected": t["expected_calls"] or t["answer_contains"]})
    model.train()
    by_kind: dict[str, list[bool]] = {}  # first turns of the synthetic group (v1's measure)
    by_group: dict[str, list[bool]] = {}  # group/turn (see encode_data.py)
    by_shape: dict[str, list[bool]] = {}  # every evaluated turn of a shape, all groups
    for r in results:
        if r["group"] == "synthetic/first":
            by_kind.setdefault(r["kind"], []).append(r["ok"])
        by_group.setdefault(r["group"], []).append(r["ok"])
        by_shape.setdefault(r["kind"], []).append(r["ok"])
    return {
        "n": len(results),
        "accuracy": sum(r["ok"] for r in results) / max(1, len(results)),
        "ended": sum(r["ended"] for r in results) / max(1, len(results)),
        "by_kind": {k: sum(v) / len(v) for k, v in sorted(by_kind.items())},
        "by_group": {k: sum(v) / len(v) for k, v in sorted(by_group.items())},
        "by_shape": {k: [sum(v), len(v)] for k, v in sorted(by_shape.items())},
        "not_evaluated": sum(r["text"] == "[not evaluated: out of time]" for r in results),
        "failures": [r for r in results if not r["ok"] and not r["text"].startswith("[not evaluated")][:60],
    }


# -- the model: HF Llama's math, with a shared prompt header ------------------------------------


class TinyLlama(torch.nn.Module):
    """``LlamaForCausalLM``'s forward pass (same parameter names, same math: RMSNorm in fp32,
    default RoPE, grouped-query attention, SiLU MLP, tied embeddings), written out so a batch of
    episodes that share their prompt header (the tool declarations, ~80% of every episode) runs
    the header once: its keys and values are computed for one sequence and attended to by every
    episode of the batch. Gradients flow through the shared header as through separate copies.
    ``check_against_hf`` verifies the logits against transformers' implementation."""

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        from torch import nn

        self.cfg = cfg
        d, hd = cfg.hidden_size, cfg.head_dim
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, hd
        self.eps = cfg.rms_norm_eps
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg.vocab_size, d)
        self.model.layers = nn.ModuleList()
        for _ in range(cfg.num_hidden_layers):
            layer = nn.Module()
            layer.self_attn = nn.Module()
            layer.self_attn.q_proj = nn.Linear(d, self.nh * hd, bias=False)
            layer.self_attn.k_proj = nn.Linear(d, self.nkv * hd, bias=False)
            layer.self_attn.v_proj = nn.Linear(d, self.nkv * hd, bias=False)
            layer.self_attn.o_proj = nn.Linear(self.nh * hd, d, bias=False)
            layer.mlp = nn.Module()
            layer.mlp.gate_proj = nn.Linear(d, cfg.intermediate_size, bias=False)
            layer.mlp.up_proj = nn.Linear(d, cfg.intermediate_size, bias=False)
            layer.mlp.down_proj = nn.Linear(cfg.intermediate_size, d, bias=False)
            layer.input_layernorm = nn.Module()
            layer.input_layernorm.weight = nn.Parameter(torch.ones(d))
            layer.post_attention_layernorm = nn.Module()
            layer.post_attention_layernorm.weight = nn.Parameter(torch.ones(d))
            self.model.layers.append(layer)
        self.model.norm = nn.Module()
        self.model.norm.weight = nn.Parameter(torch.ones(d))
        theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
        self.register_buffer("inv_freq", inv, persistent=False)
        std = cfg.initializer_range
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                torch.nn.init.normal_(m.weight, mean=0.0, std=std)

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * x.to(dt)

    def _rope(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        f = pos[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat([f, f], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    @staticmethod
    def _rot(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], dim=-1) * sin

    def _qkv(self, layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        b, t, _ = x.shape
        a = layer.self_attn
        q = a.q_proj(x).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = a.k_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = a.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        return self._rot(q, cos, sin), self._rot(k, cos, sin), v

    def _mlp(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        m = layer.mlp
        return m.down_proj(F.silu(m.gate_proj(x)) * m.up_proj(x))

    def hidden(self, header: torch.Tensor, body: torch.Tensor) -> torch.Tensor:
        """Final hidden states of ``body`` [B, T] (right-padded), each row preceded by the
        same ``header`` [H]: returns [B, T, d] (the header's own states are not returned)."""
        emb = self.model.embed_tokens
        B, T = body.shape
        H = header.shape[0]
        rep = self.nh // self.nkv
        xh = emb(header)[None]  # [1, H, d]
        xb = emb(body)
        dt = xh.dtype if not torch.is_autocast_enabled() else torch.get_autocast_dtype(xh.device.type)
        ch, sh = self._rope(torch.arange(H, device=body.device), dt)
        cb, sb = self._rope(torch.arange(H, H + T, device=body.device), dt)
        mask = torch.ones(T, H + T, dtype=torch.bool, device=body.device)
        mask[:, H:] = torch.tril(torch.ones(T, T, dtype=torch.bool, device=body.device))
        for layer in self.model.layers:
            hn = self._norm(xh, layer.input_layernorm.weight)
            qh, kh, vh = self._qkv(layer, hn, ch, sh)
            bn = self._norm(xb, layer.input_layernorm.weight)
            qb, kb, vb = self._qkv(layer, bn, cb, sb)
            kh_r, vh_r = kh.repeat_interleave(rep, 1), vh.repeat_interleave(rep, 1)
            oh = F.scaled_dot_product_attention(qh, kh_r, vh_r, is_causal=True)
            k_all = torch.cat([kh_r.expand(B, -1, -1, -1), kb.repeat_interleave(rep, 1)], dim=2)
            v_all = torch.cat([vh_r.expand(B, -1, -1, -1), vb.repeat_interleave(rep, 1)], dim=2)
            ob = F.scaled_dot_product_attention(qb, k_all, v_all, attn_mask=mask)
            xh = xh + layer.self_attn.o_proj(oh.transpose(1, 2).reshape(1, H, -1))
            xb = xb + layer.self_attn.o_proj(ob.transpose(1, 2).reshape(B, T, -1))
            xh = xh + self._mlp(layer, self._norm(xh, layer.post_attention_layernorm.weight))
            xb = xb + self._mlp(layer, self._norm(xb, layer.post_attention_layernorm.weight))
        return self._norm(xb, self.model.norm.weight)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.model.embed_tokens.weight.t()  # tied lm_head

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        sd = {k: v for k, v in self.state_dict().items() if k.startswith("model.")}
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        return sd


def check_against_hf(model: TinyLlama, hf: Any, header: torch.Tensor, body: torch.Tensor) -> float:
    """Max |logit difference| between TinyLlama (shared header) and HF Llama on header+body."""
    hf.load_state_dict(model.hf_state_dict())
    with torch.no_grad():
        ours = model.logits(model.hidden(header, body))
        full = torch.cat([header[None].expand(body.shape[0], -1), body], dim=1)
        ref = hf(input_ids=full).logits[:, header.shape[0] :]
    return float((ours - ref).abs().max())


# -- training -----------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO / ".cache" / "tiny_k3" / "device")
    ap.add_argument("--model-dir", type=Path, default=REPO / "models" / "k3-tiny")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    ap.add_argument("--max-minutes", type=float, default=6.0, help="wall clock for the whole run")
    ap.add_argument("--eval-reserve-s", type=float, default=80.0, help="kept for the final eval and saving")
    ap.add_argument("--batch-tokens", type=int, default=64 * 1024, help="padded body tokens per batch")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--max-steps", type=int, default=100_000)
    ap.add_argument("--evals", type=int, default=3, help="intermediate evaluations")
    ap.add_argument("--eval-sample", type=int, default=120, help="tasks per intermediate evaluation")
    ap.add_argument("--eval-batch", type=int, default=128)
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-shard-size", default="15MB")
    ap.add_argument("--hard-limit-s", type=float, default=1e9,
                    help="the final evaluation stops here (seconds from the start; the rest counts as not evaluated)")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke test: a few tiny steps")
    args = ap.parse_args()
    if args.smoke:
        args.max_steps, args.batch_tokens, args.warmup = 4, 1500, 2
        args.evals, args.eval_sample, args.max_new = 1, 2, 12

    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    amp = device.type == "cuda"
    log(f"device {device} ({torch.cuda.get_device_name(0) if amp else 'cpu'}), torch {torch.__version__}")

    meta = json.loads((args.data / "dataset_meta.json").read_text())
    data = Data(args.data)
    eval_tasks = json.loads((args.data / "eval.json").read_text())
    for t in eval_tasks:  # the prompt: its header (stored once, in dataset.npz) and its body
        t["prompt_ids"] = data.headers[t["header"]].tolist() + t["body_ids"]
    detok = Detok(args.model_dir)
    pad = detok.id_of["[PAD]"]
    log(f"data: {data.n} episodes, {int(data.lengths.sum())} tokens, {int(data.mask.sum())} target tokens, "
        f"length median {int(np.median(data.lengths))} max {int(data.lengths.max())}; eval tasks {len(eval_tasks)}")

    config = LlamaConfig.from_pretrained(args.model_dir)
    assert config.vocab_size == meta["vocab_size"], (config.vocab_size, meta["vocab_size"])
    model = TinyLlama(config).to(device)
    hf = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters ({2 * n_params / 1e6:.1f} MB bf16)")
    probe = data.batches(np.random.default_rng(1), 2048)[0][:3]
    hdr, body, _ = data.collate(probe, pad)
    diff = check_against_hf(model, hf, hdr.to(device), body.to(device))
    log(f"shared-header forward vs transformers' Llama: max |logit diff| {diff:.2e} (fp32)")
    assert diff < 1e-3, diff
    if amp:  # after the fp32 check: TF32 would blur it
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if amp else {}),
    )
    if args.smoke:
        eval_tasks = eval_tasks[:: max(1, len(eval_tasks) // 3)][:3]

    def run_eval(tasks_: list[dict[str, Any]], deadline: float = float("inf")) -> dict[str, Any]:
        hf.load_state_dict(model.hf_state_dict())
        return evaluate(hf, tasks_, detok, device, batch=args.eval_batch, max_new=args.max_new, amp=amp,
                        deadline=deadline)

    # Schedule on the training clock (evaluation time excluded): progress = trained seconds /
    # training budget, so the cosine ends when the time does, whatever the speed of the machine.
    budget = args.max_minutes * 60
    est_eval_s = 8.0 if amp else 0.0
    train_budget = max(1.0, budget - (time.time() - T0) - args.eval_reserve_s - args.evals * est_eval_s)
    eval_points = [(k + 1) / (args.evals + 1) for k in range(args.evals)]
    history: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    step = epoch = tokens_seen = 0
    train_clock = 0.0
    eval_time = 0.0
    done = False
    loss_acc, n_acc, tok_acc, clock_acc = 0.0, 0, 0, 0.0
    progress = 0.0
    log(f"training budget {train_budget:.0f}s (of {budget:.0f}s), batches of <= {args.batch_tokens} tokens")
    while not done:
        for idx in data.batches(rng, args.batch_tokens):
            t_step = time.time()
            if step < args.warmup:
                lr = args.lr * (step + 1) / args.warmup
            else:
                c = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
                lr = args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * c)
            for g in opt.param_groups:
                g["lr"] = lr
            hdr, ids, mask = data.collate(idx, pad)
            hdr = hdr.to(device, non_blocking=True)
            ids, mask = ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                hidden = model.hidden(hdr, ids)
                sel = mask[:, 1:]
                logits = model.logits(hidden[:, :-1][sel]).float()
            loss = F.cross_entropy(logits, ids[:, 1:][sel])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            ntok = int(ids.numel()) + int(hdr.numel())
            tokens_seen += ntok
            tok_acc += ntok
            n_acc += 1
            loss_acc += loss.detach()
            if step % 25 == 0 or args.smoke:
                loss_v = float(loss_acc) / n_acc  # syncs the device
                dt = time.time() - t_step
                train_clock += dt
                clock_acc += dt
                rec = {"step": step, "epoch": epoch, "progress": min(1.0, train_clock / train_budget), "loss": loss_v,
                       "lr": lr, "grad_norm": float(gnorm), "tokens": tokens_seen,
                       "tok_per_s": tok_acc / max(clock_acc, 1e-9), "time_s": time.time() - T0}
                history.append(rec)
                log(f"step {step} ep {epoch} p {rec['progress']:.3f} loss {loss_v:.4f} lr {lr:.2e} "
                    f"gn {rec['grad_norm']:.2f} {rec['tok_per_s'] / 1e3:.0f}k tok/s")
                loss_acc, n_acc, tok_acc, clock_acc = 0.0, 0, 0, 0.0
            else:
                dt = time.time() - t_step
                train_clock += dt
                clock_acc += dt
            progress = train_clock / train_budget
            if args.smoke:
                progress = max(progress, step / args.max_steps)
            if eval_points and progress >= eval_points[0]:
                eval_points.pop(0)
                te = time.time()
                sample = random.Random(step).sample(eval_tasks, min(args.eval_sample, len(eval_tasks)))
                r = run_eval(sample)
                eval_time += time.time() - te
                r.update(step=step, time_s=time.time() - T0, loss=history[-1]["loss"] if history else None)
                evals.append(r)
                log(f"eval @ {step}: accuracy {r['accuracy']:.3f} on {r['n']} held-out tasks "
                    f"(ended {r['ended']:.2f}) {r['by_kind']} {r['by_group']} [{time.time() - te:.1f}s]")
            over = time.time() - T0 > budget - args.eval_reserve_s
            if progress >= 1.0 or step >= args.max_steps or over:
                if over and progress < 1.0:
                    log(f"time guard: stopping at step {step}, progress {progress:.3f}")
                done = True
                break
        epoch += 1
    train_s = train_clock

    args.out.mkdir(parents=True, exist_ok=True)  # the weights first: the final eval may run out of time
    hf.load_state_dict(model.hf_state_dict())
    hf.config.architectures = ["LlamaForCausalLM"]
    hf.to(torch.bfloat16).save_pretrained(args.out, max_shard_size=args.max_shard_size, safe_serialization=True)
    GenerationConfig.from_pretrained(args.model_dir).save_pretrained(args.out)
    hf.to(torch.float32)
    log(f"saved the weights to {args.out}")

    te = time.time()
    final = run_eval(eval_tasks, deadline=T0 + args.hard_limit_s)
    final.update(step=step, time_s=time.time() - T0)
    log(f"final eval: accuracy {final['accuracy']:.3f} on {final['n']} held-out tasks (ended {final['ended']:.2f}) "
        f"{final['by_kind']} {final['by_group']} [{time.time() - te:.1f}s]")
    for f in final["failures"][:4]:
        log(f"  failure [{f['kind']}] expected {json.dumps(f['expected'])[:200]} got {f['text'][:300]!r}")

    result = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "device": torch.cuda.get_device_name(0) if amp else "cpu",
        "torch": torch.__version__,
        "params": n_params,
        "data": meta,
        "steps": step,
        "epochs_started": epoch,
        "tokens_seen": tokens_seen,
        "train_seconds": train_s,
        "eval_seconds": eval_time + (time.time() - te),
        "total_seconds": time.time() - T0,
        "loss_curve": history,
        "evals": evals,
        "final_eval": final,
    }
    (args.out / "train_log.json").write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {sorted(p.name for p in args.out.iterdir())} to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
