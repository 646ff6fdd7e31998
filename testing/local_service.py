"""A local `rrt serve` as a child process, and a tiny random-weight model to serve: what the
service tests and `benchmarks/serve_throughput.py` start, load and stop. Also tiny random
"pretrained" folders (a Llama, a GPT-2) that stand in for a downloaded model in the fine-tuning tests.

    service = LocalService(model, write_config(folder, port=free_port(), max_step_tokens=12))
    service.start(); ...; service.stop()   # SIGINT, then SIGTERM, then kill; returns survivors
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample" / "recipes.jsonl"


def tiny_model(folder: str) -> str:
    """A random-weight one-layer contextual model exported to folder (no training, no ../shared)."""
    from rrt.corpus.formats import no_source
    from rrt.modelling.models import build_model, export_model, train_tiny_tokenizer
    from rrt.recipes.loaders import read_recipes

    texts = [no_source(r.title, r.ingredients, r.steps) for r in read_recipes([str(SAMPLE)])]
    tok = train_tiny_tokenizer(texts, 1500)
    lm = build_model(
        "tiny", len(tok), {"n_layer": 1, "n_head": 2, "n_embd": 32}, pad_token_id=tok.pad_token_id
    )
    export_model(lm, tok, folder, {"variant": "contextual", "block_size": 256, "model": "tiny"})
    return folder


PRETRAINED_EOS = (
    "<|endoftext|>"  # the end token of the tiny "pretrained" tokenizers (as SmolLM2's and GPT-2's)
)
PRETRAINED_BOS = "<s>"  # the tiny Llama's own BOS, which its tokenizer prepends (as Llama's does)


def tiny_pretrained(
    folder: str, family: str = "llama", vocab_size: int = 800, seed: int = 0
) -> str:
    """A random-weight stand-in for a downloaded Hugging Face model (`llama` or `gpt2`) saved to
    folder: a byte-level BPE trained on the sample's plain text, knowing none of our tokens."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    from rrt.recipes.loaders import read_recipes

    texts = ["\n".join([r.title, *r.ingredients, *r.steps]) for r in read_recipes([str(SAMPLE)])]
    own = [PRETRAINED_EOS] + ([PRETRAINED_BOS] if family == "llama" else [])
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=own,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    if family == "llama":
        # Like Llama's, this tokenizer prepends its BOS to every text it encodes.
        tok = PreTrainedTokenizerFast(
            tokenizer_object=backend,
            bos_token=PRETRAINED_BOS,
            eos_token=PRETRAINED_EOS,
            unk_token=PRETRAINED_EOS,
            add_bos_token=True,
        )
    elif family == "gpt2":
        tok = PreTrainedTokenizerFast(
            tokenizer_object=backend,
            bos_token=PRETRAINED_EOS,
            eos_token=PRETRAINED_EOS,
            unk_token=PRETRAINED_EOS,
        )
    else:
        raise ValueError(f"family must be llama or gpt2 (got {family!r})")
    torch.manual_seed(seed)
    if family == "llama":
        lm = LlamaForCausalLM(
            LlamaConfig(
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                vocab_size=len(tok),
                max_position_embeddings=512,
                tie_word_embeddings=True,
                bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id,
            )
        )
    else:
        lm = GPT2LMHeadModel(
            GPT2Config(
                n_layer=2,
                n_head=4,
                n_embd=64,
                n_positions=512,
                vocab_size=len(tok),
                bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id,
            )
        )
    lm.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def tiny_ctrl(folder: str, seed: int = 0) -> str:
    """A tiny random-weight CTRL (Hugging Face's CTRLLMHeadModel) saved to folder, with a byte-level
    BPE trained on the sample's text standing in for CTRL's own tokenizer (built offline)."""
    import torch
    from transformers import CTRLConfig, CTRLLMHeadModel

    from rrt.modelling.models import train_tiny_tokenizer
    from rrt.recipes.loaders import read_recipes

    texts = [
        "Links "
        + " \n ".join([r.title, *r.ingredients, *(f"{n}. {s}" for n, s in enumerate(r.steps, 1))])
        for r in read_recipes([str(SAMPLE)])
    ]
    tok = train_tiny_tokenizer(texts, 600)
    torch.manual_seed(seed)
    lm = CTRLLMHeadModel(
        CTRLConfig(
            vocab_size=len(tok),
            n_positions=256,
            n_embd=32,
            dff=64,
            n_layer=1,
            n_head=2,
            pad_token_id=tok.pad_token_id,
        )
    )
    lm.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def tiny_llama(folder: str) -> str:
    """A tiny random-weight `pretrained` Llama folder (see tiny_pretrained)."""
    return tiny_pretrained(folder, "llama")


def tiny_export(folder: str, base: str, variant: str = "contextual", block_size: int = 256) -> str:
    """A model fine-tuned from `base` for zero steps (our tokens added, no training) exported to
    folder as a training run would: a quick Llama (or any family) model to serve or rewrite with."""
    from rrt.modelling.models import build_model, export_model, load_tokenizer

    tok = load_tokenizer(base)
    lm = build_model(base, len(tok), pad_token_id=tok.pad_token_id, tokenizer=tok)
    export_model(lm, tok, folder, {"variant": variant, "block_size": block_size, "model": base})
    return folder


def free_port() -> int:
    """A TCP port nobody listens on now (outside Ray's worker port range)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_config(
    folder: str,
    name: str = "serve_config.yaml",
    ray: dict | None = None,
    base: str | None = None,
    **serve,
) -> str:
    """A copy of `base` (default ray_config.yaml) with these `serve` settings (nested dicts merge), written
    into folder."""
    from rrt.config import load_config

    config = load_config(base or str(ROOT / "ray_config.yaml"))
    config.pop("profile", None)
    for key, value in serve.items():
        current = config["serve"].get(key)
        config["serve"][key] = (
            {**current, **value} if isinstance(current, dict) and isinstance(value, dict) else value
        )
    config["ray"].update(ray or {})
    path = Path(folder) / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


class LocalService:
    """`rrt serve` in a child process with its own local Ray, logging into a file."""

    def __init__(self, model: str, config: str, env: dict | None = None, log: str | None = None):
        from rrt.config import load_config

        settings = load_config(config)["serve"]
        self.port, self.host = int(settings["port"]), settings.get("host", "127.0.0.1")
        self.url = f"http://{self.host}:{self.port}"
        self.model, self.config, self.log = (
            model,
            config,
            log or str(Path(config).with_suffix(".log")),
        )
        # Never join someone else's cluster: the service starts (and stops) its own Ray.
        self.env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RRT_API_KEY")}
        self.env.update({"PYTHONUNBUFFERED": "1", **(env or {})})
        self.proc: subprocess.Popen | None = None
        self.stopped_by: int | None = None  # the signal the service finally stopped on
        self.seen: dict[int, float] = {}  # pid -> create time of every process the service started

    def start(self, timeout: float = 180, attempts: int = 3) -> LocalService:
        """Start the service and wait until /healthz answers; RuntimeError with the log tail if not.

        A failed start is retried: on a busy machine the raylet can give up waiting for its agents."""
        for attempt in range(attempts):
            try:
                return self._start(timeout)
            except RuntimeError:
                self.stop(signal.SIGTERM, grace=15)
                if attempt == attempts - 1:
                    raise
        return self

    def _start(self, timeout: float) -> LocalService:
        import requests

        handle = open(self.log, "a", encoding="utf-8")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--model", self.model, "--config", self.config],
            cwd=ROOT,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.descendants()
            if self.proc.poll() is not None:
                raise RuntimeError(f"rrt serve exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if requests.get(self.url + "/healthz", timeout=5).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(1)
        raise RuntimeError(
            f"rrt serve did not answer /healthz within {timeout:.0f}s:\n{self.tail()}"
        )

    def tail(self, chars: int = 4000) -> str:
        """The end of the service's log."""
        return Path(self.log).read_text(encoding="utf-8", errors="replace")[-chars:]

    def descendants(self) -> list:
        """Every live process under the service (Ray's GCS, raylet, workers); remembered for stop()."""
        import psutil

        try:
            found = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for proc in found:
            try:
                self.seen.setdefault(proc.pid, proc.create_time())
            except psutil.NoSuchProcess:
                pass
        return found

    def replicas(self, deployment: str = "Rewriter") -> list:
        """The service's replica processes of one deployment (their title names it)."""
        import psutil

        out = []
        for proc in self.descendants():
            try:
                if f"ServeReplica:rrt:{deployment}" in " ".join(proc.cmdline()):
                    out.append(proc)
            except psutil.Error:
                pass
        return out

    def stop(self, first: int = signal.SIGINT, grace: float = 60) -> list[str]:
        """Stop the service (first signal, then SIGTERM, then kill); the started processes still alive."""
        import psutil

        if self.proc is None:
            return []
        self.descendants()
        for sig, wait in ((first, grace), (signal.SIGTERM, 15), (signal.SIGKILL, 10)):
            if self.proc.poll() is not None:
                break
            self.stopped_by = sig
            self.proc.send_signal(sig)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                pass
        deadline, left = time.monotonic() + 30, []
        while True:
            left = []
            for pid, created in self.seen.items():
                try:
                    proc = psutil.Process(pid)
                    if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                        left.append(proc)
                except psutil.NoSuchProcess:
                    pass
            if not left or time.monotonic() > deadline:
                break
            time.sleep(1)
        names = [f"{p.pid} {p.name()}" for p in left]
        for proc in left:  # leave nothing behind for the next run, but report it
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc, self.seen = None, {}
        return names
