"""One rank's share of the decode loop's Kimi-shaped model (:mod:`k25trace.synth.decode_loop` describes it)."""

from __future__ import annotations

import math
import time
from typing import Any

from k25trace.synth.decode_options import DecodeLoopOptions, log
from k25trace.synth.marlin_gemm import MarlinGemms


class Model:
    """One rank's share of the model; ``forward(ids)`` is what the CUDA graph captures."""

    def __init__(self, a: DecodeLoopOptions, rank: int, world: int, device: Any, dtype: Any) -> None:
        import torch

        if a.heads % world or a.experts % world or a.moe_intermediate % world or a.vocab % world:
            raise SystemExit("heads, experts, moe-intermediate and vocab must divide by the world size")
        self.a, self.rank, self.world, self.dev, self.dtype = a, rank, world, device, dtype
        H, h = a.hidden, a.heads // world
        self.h = h
        qk = a.nope_dim + a.rope_dim
        self.E = a.experts // world
        inter = a.moe_intermediate

        def w(*shape: int, std: float | None = None) -> Any:
            t = torch.empty(*shape, dtype=dtype, device=device)
            return t.normal_(0.0, std if std is not None else 1.0 / math.sqrt(shape[-2] if len(shape) > 1 else 1))

        # --marlin: the extension is built and checked first (its check draws from the RNG; without --marlin the
        # weights below are drawn exactly as before these flags existed)
        self.marlin = MarlinGemms(a.marlin_src, a.marlin_build, device) if a.marlin else None
        self.kinds = ["dense" if i < a.dense_layers else "moe" for i in range(a.layers)]
        self.top_ks = [
            0 if kind == "dense" else a.top_k * (a.odd_factor if i == a.odd_layer else 1)
            for i, kind in enumerate(self.kinds)
        ]
        self.embed = w(a.vocab // world if world > 1 else a.vocab, H, std=0.02)
        self.layers = []
        for i in range(a.layers):
            L = {
                "in_norm": torch.ones(H, dtype=dtype, device=device),
                "qkv_a": w(H, a.q_lora_rank + a.kv_lora_rank + a.rope_dim),
                "q_a_norm": torch.ones(a.q_lora_rank, dtype=dtype, device=device),
                "kv_a_norm": torch.ones(a.kv_lora_rank, dtype=dtype, device=device),
                "q_b": w(a.q_lora_rank, h * qk),
                "w_uk": w(h, a.nope_dim, a.kv_lora_rank),
                "w_uv": w(h, a.kv_lora_rank, a.v_dim),
                "o": w(h * a.v_dim, H),
                "post_norm": torch.ones(H, dtype=dtype, device=device),
            }
            if self.kinds[i] == "dense":  # Kimi's first_k_dense_replace layers: a plain SwiGLU MLP
                di = a.dense_intermediate // world
                if self.marlin:
                    L.update({"d13": self.marlin.weight(H, 2 * di), "d2": self.marlin.weight(di, H)})
                else:
                    L.update({"d13": w(H, 2 * di), "d2": w(di, H)})
            else:
                L.update(
                    {
                        "gate": w(H, a.experts),
                        "gate_bias": torch.zeros(a.experts, dtype=torch.float32, device=device),
                        "sh13": w(H, 2 * inter // world),
                        "sh2": w(inter // world, H),
                    }
                )
                if self.marlin:  # this layer's k experts, concatenated (see the module doc)
                    k = self.top_ks[i]
                    L.update(
                        {
                            "m13": self.marlin.weight(H, k * 2 * inter // world),
                            "m2": self.marlin.weight(k * inter // world, H),
                        }
                    )
            L["kind"], L["top_k"] = self.kinds[i], self.top_ks[i]
            self.layers.append(L)
        if self.marlin:
            self.marlin.finish()
            self.w13 = self.w2 = None
        else:
            # the routed experts: one pool for all layers (see the module doc)
            # stored (E, N, K) and used transposed, the layout torchtitan feeds torch._grouped_mm on Hopper
            self.w13 = w(self.E, 2 * inter, H, std=1.0 / math.sqrt(H))
            self.w2 = w(self.E, H, inter, std=1.0 / math.sqrt(inter))
        self.final_norm = torch.ones(H, dtype=dtype, device=device)
        self.lm_head = w(H, a.vocab // world, std=0.02)
        inv = 1.0 / (10000 ** (torch.arange(0, a.rope_dim, 2, dtype=torch.float32) / a.rope_dim))
        self.inv_freq = inv.to(device)
        self.grouped = False if self.marlin else self._check_grouped_mm()
        self.gap: str | None = None  # "sleep" | "copy": what to do before layer gap_layer in this forward (eager)
        self.site = 0  # index of the next all-reduce in the current forward (the call site)
        self.spin_cycles = 0  # > 0: spin this many GPU cycles before the --gpu-delay-site all-reduce

    def _check_grouped_mm(self) -> bool:
        import torch

        if not hasattr(torch, "_grouped_mm"):
            return False
        try:
            a = torch.randn(5, 64, dtype=self.dtype, device=self.dev)
            b = torch.randn(3, 32, 64, dtype=self.dtype, device=self.dev).transpose(-2, -1)
            offs = torch.tensor([2, 2, 5], dtype=torch.int32, device=self.dev)
            got = torch._grouped_mm(a, b, offs=offs)
            ref = torch.cat([a[:2] @ b[0], a[2:5] @ b[2]])
            return bool(torch.allclose(got.float(), ref.float(), atol=0.5, rtol=0.05))
        except Exception as exc:  # noqa: BLE001 - any failure means: use the fallback
            log(self.rank, f"torch._grouped_mm unusable here ({type(exc).__name__}: {exc}); experts by gathered bmm")
            return False

    # ---------------------------------------------------------------------------------------------- pieces

    def _all_reduce(self, x: Any) -> Any:
        site = self.site
        self.site += 1
        if self.world > 1:
            import torch.distributed as dist

            if self.spin_cycles and site == self.a.gpu_delay_site:
                import torch

                torch.cuda._sleep(self.spin_cycles)  # this rank arrives late at this call site, on the GPU
            dist.all_reduce(x)
        return x

    @staticmethod
    def _rms(x: Any, weight: Any, eps: float = 1e-6) -> Any:
        import torch

        return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)

    def _rope(self, x: Any, pos: Any) -> Any:
        import torch

        freqs = pos.float()[:, None] * self.inv_freq[None, :]  # (B, rope/2)
        cos, sin = torch.cos(freqs).to(x.dtype), torch.sin(freqs).to(x.dtype)
        while cos.dim() < x.dim():
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def _attention(self, L: dict, x: Any, cache: Any, pos: Any) -> Any:
        import torch

        a, h = self.a, self.h
        B = x.shape[0]
        qkv = x @ L["qkv_a"]
        q_lat, kv_lat, k_pe = qkv.split([a.q_lora_rank, a.kv_lora_rank, a.rope_dim], dim=-1)
        q = (self._rms(q_lat, L["q_a_norm"]) @ L["q_b"]).view(B, h, a.nope_dim + a.rope_dim)
        q_nope, q_pe = q.split([a.nope_dim, a.rope_dim], dim=-1)
        q_pe = self._rope(q_pe, pos)
        k_pe = self._rope(k_pe, pos)
        kv = torch.cat([self._rms(kv_lat, L["kv_a_norm"]), k_pe], dim=-1)  # (B, 576)
        # write this token's latent into the cache at its position (device tensor: graph-safe)
        cache.index_put_((torch.arange(B, device=x.device), pos), kv)
        q_abs = torch.bmm(q_nope.transpose(0, 1), L["w_uk"]).transpose(0, 1)  # (B, h, 512)
        qf = torch.cat([q_abs, q_pe], dim=-1)  # (B, h, 576)
        scores = torch.bmm(qf, cache.transpose(1, 2)) * (1.0 / math.sqrt(a.nope_dim + a.rope_dim))  # (B, h, ctx)
        p = torch.softmax(scores.float(), dim=-1).to(x.dtype)
        o_lat = torch.bmm(p, cache[:, :, : a.kv_lora_rank])  # (B, h, 512)
        o = torch.bmm(o_lat.transpose(0, 1), L["w_uv"]).transpose(0, 1).reshape(B, h * a.v_dim)
        return self._all_reduce(o @ L["o"])

    def _moe(self, L: dict, x: Any) -> Any:
        import torch

        a = self.a
        B, H = x.shape
        top_k = L["top_k"]
        logits = (x @ L["gate"]).float()
        scores = torch.sigmoid(logits)
        top_w, top_ids = torch.topk(scores + L["gate_bias"], top_k, dim=-1)
        top_w = torch.gather(scores, 1, top_ids)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        if self.marlin is not None:  # the layer's k experts as two Marlin GEMMs (see the module doc)
            inter = a.moe_intermediate // self.world
            h13 = self.marlin.mm(x, L["m13"]).view(B, top_k, 2 * inter)
            g, u = h13.chunk(2, dim=-1)
            hs = (torch.nn.functional.silu(g) * u) * top_w.to(x.dtype)[:, :, None]
            out = self.marlin.mm(hs.reshape(B, top_k * inter), L["m2"])
            sh = x @ L["sh13"]
            g, u = sh.chunk(2, dim=-1)
            out = out + (torch.nn.functional.silu(g) * u) @ L["sh2"]
            return self._all_reduce(out)
        local = top_ids - self.rank * self.E
        valid = (local >= 0) & (local < self.E)
        local = torch.where(valid, local, torch.zeros_like(local)).flatten()
        weight = torch.where(valid, top_w, torch.zeros_like(top_w)).flatten().to(x.dtype)
        token = torch.arange(B, device=x.device).repeat_interleave(top_k)
        order = torch.argsort(local)
        sorted_tok = token[order]
        xs = x[sorted_tok]
        w13, w2 = self.w13, self.w2
        assert w13 is not None and w2 is not None  # the routed experts' pool: there whenever Marlin is not used
        if self.grouped:
            counts = torch.zeros(self.E, dtype=torch.int32, device=x.device)
            counts.scatter_add_(0, local, torch.ones_like(local, dtype=torch.int32))
            offs = torch.cumsum(counts, 0, dtype=torch.int32)
            h13 = torch._grouped_mm(xs, w13.transpose(-2, -1), offs=offs)
            g, u = h13.chunk(2, dim=-1)
            y = torch._grouped_mm(torch.nn.functional.silu(g) * u, w2.transpose(-2, -1), offs=offs)
        else:  # gathered per-pair weights (slow at large batch; only when _grouped_mm is missing)
            e = local[order]
            h13 = torch.bmm(xs.unsqueeze(1), w13[e].transpose(-2, -1)).squeeze(1)
            g, u = h13.chunk(2, dim=-1)
            y = torch.bmm((torch.nn.functional.silu(g) * u).unsqueeze(1), w2[e].transpose(-2, -1)).squeeze(1)
        out = torch.zeros_like(x)
        out.index_add_(0, sorted_tok, y * weight[order, None])
        sh = x @ L["sh13"]
        g, u = sh.chunk(2, dim=-1)
        out = out + (torch.nn.functional.silu(g) * u) @ L["sh2"]
        return self._all_reduce(out)

    def _dense_mlp(self, L: dict, x: Any) -> Any:
        import torch

        h = self.marlin.mm(x, L["d13"]) if self.marlin is not None else x @ L["d13"]
        g, u = h.chunk(2, dim=-1)
        act = torch.nn.functional.silu(g) * u
        y = self.marlin.mm(act, L["d2"]) if self.marlin is not None else act @ L["d2"]
        return self._all_reduce(y)

    def forward(
        self, ids: Any, pos: Any, caches: list, spin_cycles: int = 0, annotate: bool = False, sample: bool = False
    ) -> Any:
        """The decode forward: embedding, the layers, the final norm (what the CUDA graph captures); with
        ``sample`` also the lm_head and argmax (returns the next tokens, else the final hidden states). With
        ``annotate`` the regions are ``record_function`` ranges ``pre``, ``model.layers.{i}`` and ``post`` (the
        latter holds the lm_head and argmax only with ``sample``); the kernels are the same either way."""
        import contextlib

        import torch

        region = torch.profiler.record_function if annotate else (lambda _name: contextlib.nullcontext())
        self.site, self.spin_cycles = 0, spin_cycles
        with region("pre"):
            if self.world > 1:  # vocab-parallel embedding: rows outside this rank's shard are 0, the sum restores
                V = self.embed.shape[0]
                local = ids - self.rank * V
                ok = (local >= 0) & (local < V)
                x = self.embed[torch.where(ok, local, torch.zeros_like(local))] * ok[:, None].to(self.dtype)
                x = self._all_reduce(x)
            else:
                x = self.embed[ids]
        residual = x
        gap_layer = self.a.gap_layer if self.a.gap_layer is not None else len(self.layers) // 2
        for i, (L, cache) in enumerate(zip(self.layers, caches, strict=True)):
            if i == gap_layer and self.gap == "sleep":
                with torch.profiler.record_function("injected_host_sleep"):
                    time.sleep(self.a.host_gap_us / 1e6)
            elif i == gap_layer and self.gap == "copy":
                with torch.profiler.record_function("injected_blocking_copy"):
                    residual[:1, :8].float().cpu()  # D2H: the host waits for everything queued before it
            with region(f"model.layers.{i}"):
                x = self._attention(L, self._rms(residual, L["in_norm"]), cache, pos)
                residual = residual + x
                mlp = self._dense_mlp if L["kind"] == "dense" else self._moe
                x = mlp(L, self._rms(residual, L["post_norm"]))
                residual = residual + x
        with region("post"):
            hidden = self._rms(residual, self.final_norm)
            return self.logits_and_sample(hidden) if sample else hidden

    def logits_and_sample(self, hidden: Any) -> Any:
        import torch

        logits = hidden @ self.lm_head
        if self.world > 1:
            import torch.distributed as dist

            parts = [torch.empty_like(logits) for _ in range(self.world)]
            dist.all_gather(parts, logits)
            logits = torch.cat(parts, dim=-1)
        return torch.argmax(logits, dim=-1)
