"""A GPT-2-shaped decoder in plain PyTorch, scriptable with torch.jit.script: token and position
embeddings, pre-LayerNorm blocks of causal self-attention and a GELU MLP, a final LayerNorm and a
language-model head tied to the token embedding. GPT(GPT.SMALL) is GPT-2 small's shape (12 layers,
12 heads, 768 wide, 50257 tokens, 1024 positions: 124M parameters); the tests train a tiny one.

forward(idx [B, T] int64) returns logits [B, T, vocab]: train it with Shoal's per-token
cross-entropy (--loss cross_entropy --classes <vocab>, --input 'int64[B,T]:<vocab>').

    python3 gpt.py OUT.pt [small|tiny]    # saves a scripted GPT (random init)
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)
        self.n_head = n_head
        self.scale = 1.0 / math.sqrt(n_embd // n_head)
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.drop(self.proj(F.gelu(self.fc(self.ln_2(x)))))


class GPT(nn.Module):
    SMALL = dict(vocab=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, dropout=0.0)
    TINY = dict(vocab=100, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0)

    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg["vocab"], cfg["n_embd"])
        self.wpe = nn.Embedding(cfg["block_size"], cfg["n_embd"])
        self.drop = nn.Dropout(cfg["dropout"])
        self.h = nn.ModuleList([Block(cfg["n_embd"], cfg["n_head"], cfg["block_size"],
                                      cfg["dropout"]) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(cfg["n_embd"])
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab"], bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        T = idx.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


if __name__ == "__main__":
    size = sys.argv[2] if len(sys.argv) > 2 else "small"
    torch.manual_seed(0)
    model = GPT(GPT.SMALL if size == "small" else GPT.TINY)
    print(f"GPT {size}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
    torch.jit.script(model).save(sys.argv[1])
