#!/usr/bin/env python3
"""The eager-PyTorch twin of colo-run's GPU benchmark: the same GPT (pre-norm, LayerNorm, tanh GeLU,
learned positions, tied embeddings), bf16 autocast over fp32 weights, scaled_dot_product_attention and
fused AdamW. Prints one JSON object: median step seconds, tokens/s, MFU and peak memory.

  python3 scripts/gpu/eager_gpt.py --layers 24 --hidden 1024 --heads 16 --vocab 50257 --seq 1024 --batch 8
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1, self.norm2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.up, self.down = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout, is_causal=True).transpose(1, 2).reshape(b, s, h)
        x = x + F.dropout(self.proj(a), self.dropout)
        return x + F.dropout(self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh")), self.dropout)


class Gpt(nn.Module):
    def __init__(self, layers, h, heads, vocab, seq, dropout):
        super().__init__()
        self.word, self.pos = nn.Embedding(vocab, h), nn.Embedding(seq, h)
        for table in (self.word, self.pos):
            nn.init.normal_(table.weight, std=0.02)  # GPT-2's initialisation, as colo-run's
        self.dropout = dropout
        self.blocks = nn.ModuleList(Block(h, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(h)

    def forward(self, ids, labels):
        x = F.dropout(self.word(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device)), self.dropout)
        for blk in self.blocks:
            x = blk(x)
        logits = self.norm(x) @ self.word.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 24), ("hidden", 1024), ("heads", 16), ("vocab", 50257), ("seq", 1024), ("batch", 8), ("steps", 20)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--dropout", type=float, default=0.1, help="GPT-2's dropout (attention, residuals, embeddings)")
    p.add_argument("--trace", help="then record two more steps as a Chrome trace here (phases named as colo-run's)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak (H100/H200 SXM: 989)")
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("eager_gpt.py: no CUDA device")
    torch.manual_seed(0)
    model = Gpt(a.layers, a.hidden, a.heads, a.vocab, a.seq, a.dropout).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    params = sum(t.numel() for t in model.parameters())
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device="cuda")
    times = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.steps + 3):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        stop.record()
        stop.synchronize()
        if step >= 3:
            times.append(start.elapsed_time(stop) / 1e3)
    if a.trace:
        from torch.profiler import ProfilerActivity, profile, record_function
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                with record_function("colo:forward"), torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(ids[:, :-1], ids[:, 1:])
                with record_function("colo:backward"):
                    loss.backward()
                with record_function("colo:optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
        prof.export_chrome_trace(a.trace)
    t = statistics.median(times)
    tokens = a.batch * a.seq
    flops = 6 * params * tokens + 12 * a.layers * a.hidden * a.seq * tokens  # PaLM's count, attention included
    print(json.dumps({"framework": "eager PyTorch " + torch.__version__, "params": params, "step_s": t, "tokens_per_s": tokens / t,
                      "mfu": flops / t / (a.peak_tflops * 1e12), "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                      "peak_reserved_bytes": torch.cuda.max_memory_reserved(), "loss": loss.item(), "device": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
