"""Every model of the three papers, as spec factories.

Each factory takes its input size (and the papers' options) as parameters, so tests and the
equivalence gate can build the same layers on small inputs.
"""

from __future__ import annotations

from dlbench.models.layers import (
    GELU,
    LRN,
    LSTM,
    Activation,
    Attention,
    BatchNorm,
    Conv2d,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    GlobalAvgPool,
    Layer,
    LayerNorm,
    LMHead,
    Mark,
    MaskedMean,
    PatchEmbed,
    Pool2d,
    PositionEmbedding,
    Residual,
    RMSNorm,
    SegmentEmbedding,
    SkipBlock,
    SwiGLU,
    TakeToken,
    TiedDense,
    ZeroPadShortcut,
)
from dlbench.models.spec import InputSpec, LossSpec, ModelSpec

CE = LossSpec("softmax_ce")
BAHRAMPOUR = "Bahrampour et al. 2016"
SHI = "Shi et al. 2016 (DLBench)"
LIU = "Liu et al. 2018"
PROBE = "dlbench probe (library probes, not a paper's model)"


def lenet(image_size: int = 28, classes: int = 10) -> ModelSpec:
    """Caffe's LeNet as Bahrampour et al. ran it (pooling before tanh, as in their Table 2 set-up).
    431,080 parameters at 28x28."""
    layers = (
        Conv2d("conv1", 20, 5, init="glorot"),
        Pool2d("max", 2, 2),
        Activation("tanh"),
        Conv2d("conv2", 50, 5, init="glorot"),
        Pool2d("max", 2, 2),
        Activation("tanh"),
        Flatten(),
        Dense("fc1", 500, init="he"),
        Activation("relu"),
        Dense("fc2", classes),
    )
    return ModelSpec(
        "lenet", layers, InputSpec("image", (1, image_size, image_size), classes=classes), CE,
        source=BAHRAMPOUR, description="LeNet on MNIST", default_batch=64, learning_rate=0.01,
    )


def alexnet(image_size: int = 224, classes: int = 1000, lrn: bool = True, groups: int = 2,
            dropout: float = 0.5) -> ModelSpec:
    """AlexNet, Caffe's reference layout (LRN after ReLU, two-tower groups).
    60,965,224 parameters at 224x224 with groups 2; 62,378,344 with groups 1."""
    def norm() -> tuple[Layer, ...]:
        return (LRN(5, 1e-4, 0.75, 1.0),) if lrn else ()

    def drop() -> tuple[Layer, ...]:
        return (Dropout(dropout),) if dropout > 0 else ()

    relu = Activation("relu")
    layers = (
        Conv2d("conv1", 96, 11, stride=4, padding=2), relu, *norm(), Pool2d("max", 3, 2),
        Conv2d("conv2", 256, 5, padding=2, groups=groups), relu, *norm(), Pool2d("max", 3, 2),
        Conv2d("conv3", 384, 3, padding=1), relu,
        Conv2d("conv4", 384, 3, padding=1, groups=groups), relu,
        Conv2d("conv5", 256, 3, padding=1, groups=groups), relu,
        Pool2d("max", 3, 2),
        Flatten(),
        Dense("fc6", 4096, init="he"), relu, *drop(),
        Dense("fc7", 4096, init="he"), relu, *drop(),
        Dense("fc8", classes),
    )
    return ModelSpec(
        "alexnet", layers, InputSpec("image", (3, image_size, image_size), classes=classes), CE,
        source=BAHRAMPOUR, description="AlexNet (ImageNet)", default_batch=256, learning_rate=0.01,
        options={"lrn": lrn, "groups": groups},
    )


def alexnet_s(image_size: int = 224, classes: int = 1000) -> ModelSpec:
    """Shi et al.'s synthetic AlexNet: groups 1, no LRN, no dropout."""
    spec = alexnet(image_size, classes, lrn=False, groups=1, dropout=0.0)
    return _renamed(spec, "alexnet-s", SHI, "AlexNet-S (synthetic ImageNet)", 16)


def sae(phase: str = "finetune", input_dim: int = 784, sizes: tuple[int, ...] = (400, 200, 100),
        classes: int = 10) -> ModelSpec:
    """Stacked autoencoder with tied weights (Bahrampour et al.).

    ``pretrain{k}``: encoders 1..k-1 frozen, autoencoder k (encoder k and its tied decoder)
    reconstructs the output of encoder k-1 (the input for k = 1); squared-error loss.
    ``finetune``: encoders 1..3 -> fc 10, softmax cross-entropy.
    """
    sig = Activation("sigmoid")
    if phase == "finetune":
        layers: list[Layer] = []
        for i, units in enumerate(sizes, 1):
            layers += [Dense(f"enc{i}", units), sig]
        layers.append(Dense("fc", classes))
        loss, labels = CE, "class"
    elif phase.startswith("pretrain") and phase[8:].isdigit() and 1 <= int(phase[8:]) <= len(sizes):
        k = int(phase[8:])
        layers = []
        for i, units in enumerate(sizes[: k - 1], 1):
            layers += [Dense(f"enc{i}", units, trainable=False), sig]
        in_units = sizes[k - 2] if k > 1 else input_dim
        layers += [Mark("target"), Dense(f"enc{k}", sizes[k - 1]), sig,
                   TiedDense(f"dec{k}", f"enc{k}", in_units), sig]
        loss, labels = LossSpec("mse", "target"), "none"
    else:
        raise ValueError(f"sae phase must be finetune or pretrain1..{len(sizes)}, got {phase!r}")
    return ModelSpec(
        "sae", tuple(layers), InputSpec("vector", (input_dim,), labels=labels, classes=classes), loss,
        source=BAHRAMPOUR, description=f"stacked autoencoder {'-'.join(map(str, sizes))}, {phase}",
        default_batch=64, learning_rate=0.01, options={"phase": phase},
    )


def sae_large(phase: str = "finetune", input_dim: int = 784, classes: int = 10) -> ModelSpec:
    return _renamed(sae(phase, input_dim, (800, 1000, 2000), classes), "sae-large")


def lstm_imdb(vocab: int = 10000, embed: int = 128, units: int = 128, max_len: int = 100,
              classes: int = 2) -> ModelSpec:
    """Bahrampour's sentiment LSTM: mean of the hidden states over each review's valid steps.
    Reviews are padded to the longest in the batch (at most ``max_len``), with a mask."""
    layers = (Embedding("embed", vocab, embed), LSTM("lstm", units), MaskedMean(), Dense("fc", classes))
    return ModelSpec(
        "lstm-imdb", layers,
        InputSpec("tokens", (max_len,), classes=classes, vocab=vocab, variable_length=True,
                  min_length=max(1, max_len // 5)),
        CE, source=BAHRAMPOUR, description="LSTM sentiment (IMDB)", default_batch=16, learning_rate=1.0,
    )


def _fcn(name: str, input_dim: int, hidden: tuple[int, ...], classes: int, **kw) -> ModelSpec:
    layers: list[Layer] = []
    for i, units in enumerate(hidden, 1):
        layers += [Dense(f"fc{i}", units), Activation("sigmoid")]
    layers.append(Dense(f"fc{len(hidden) + 1}", classes))
    return ModelSpec(name, tuple(layers), InputSpec("vector", (input_dim,), classes=classes), CE, **kw)


def fcn_s(input_dim: int = 26752, hidden: int = 2048, classes: int = 26752) -> ModelSpec:
    """Shi et al.'s synthetic fully connected net: 4 sigmoid layers of 2048, 26752 outputs."""
    return _fcn("fcn-s", input_dim, (hidden,) * 4, classes, source=SHI,
                description="FCN-S (synthetic)", default_batch=64, learning_rate=0.05)


def fcn_r(input_dim: int = 784, classes: int = 10) -> ModelSpec:
    """Shi et al.'s MNIST fully connected net: 784-2048-4096-1024-10, sigmoid hidden."""
    return _fcn("fcn-r", input_dim, (2048, 4096, 1024), classes, source=SHI,
                description="FCN-R (MNIST)", default_batch=1024, learning_rate=0.05)


def alexnet_r(image_size: int = 32, classes: int = 10) -> ModelSpec:
    """cuda-convnet layers-18pct without LRN (Shi et al.'s AlexNet-R on CIFAR-10);
    pooling rounds up as Caffe does: 32 -> 16 -> 8 -> 4."""
    relu = Activation("relu")
    layers = (
        Conv2d("conv1", 32, 5, padding=2), Pool2d("max", 3, 2, ceil_mode=True), relu,
        Conv2d("conv2", 32, 5, padding=2), relu, Pool2d("avg", 3, 2, ceil_mode=True),
        Conv2d("conv3", 64, 5, padding=2), relu, Pool2d("avg", 3, 2, ceil_mode=True),
        Flatten(), Dense("fc", classes),
    )
    return ModelSpec(
        "alexnet-r", layers, InputSpec("image", (3, image_size, image_size), classes=classes), CE,
        source=SHI, description="AlexNet-R (CIFAR-10)", default_batch=1024, learning_rate=0.01,
    )


def _conv_bn(name: str, out: int, kernel: int, stride: int = 1, padding: int = 0) -> tuple[Layer, ...]:
    return (Conv2d(f"{name}.conv", out, kernel, stride, padding, bias=False), BatchNorm(f"{name}.bn"))


def resnet_56(image_size: int = 32, classes: int = 10, n: int = 9) -> ModelSpec:
    """He et al. 2016 CIFAR ResNet (6n+2 layers, n=9): basic blocks of 16/32/64 filters,
    identity shortcuts, option A (subsample + zero-padded channels) where the shape changes."""
    relu = Activation("relu")
    layers: list[Layer] = [*_conv_bn("stem", 16, 3, 1, 1), relu]
    in_ch = 16
    for stage, width in enumerate((16, 32, 64), 1):
        for block in range(n):
            stride = 2 if stage > 1 and block == 0 else 1
            name = f"s{stage}b{block}"
            body = (*_conv_bn(f"{name}.a", width, 3, stride, 1), relu, *_conv_bn(f"{name}.b", width, 3, 1, 1))
            short = (ZeroPadShortcut(width, stride),) if (stride != 1 or width != in_ch) else ()
            layers.append(Residual(body, short))
            in_ch = width
    layers += [GlobalAvgPool(), Dense("fc", classes, init="he")]
    return ModelSpec(
        "resnet-56", tuple(layers), InputSpec("image", (3, image_size, image_size), classes=classes), CE,
        source=SHI, description="ResNet-56 (CIFAR-10)", default_batch=128, learning_rate=0.01,
    )


def resnet_50(image_size: int = 224, classes: int = 1000, cifar: bool = False) -> ModelSpec:
    """He et al. 2016 ResNet-50: bottlenecks [3, 4, 6, 3], projection shortcuts, batch norm.
    The stride of a down-sampling block sits on its first 1x1 convolution, as in the paper's
    Caffe model (torchvision's "v1.5" moves it to the 3x3: same parameters, more FLOPs).
    25,557,032 parameters at 1000 classes.

    ``cifar``: Liu et al.'s CIFAR-10 form, a 3x3 stride-1 stem without max pooling
    (23,520,842 parameters; the paper's text says 11.7 million, which is ResNet-18's count and
    disagrees with a 50-layer bottleneck network; we follow the layers)."""
    relu = Activation("relu")
    if cifar:
        layers: list[Layer] = [*_conv_bn("stem", 64, 3, 1, 1), relu]
    else:
        layers = [*_conv_bn("stem", 64, 7, 2, 3), relu, Pool2d("max", 3, 2, padding=1)]
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True), 1):
        for block in range(blocks):
            stride = 2 if stage > 1 and block == 0 else 1
            name = f"s{stage}b{block}"
            body = (*_conv_bn(f"{name}.a", width, 1, stride), relu,
                    *_conv_bn(f"{name}.b", width, 3, 1, 1), relu,
                    *_conv_bn(f"{name}.c", width * 4, 1))
            short = _conv_bn(f"{name}.proj", width * 4, 1, stride) if block == 0 else ()
            layers.append(Residual(body, short))
    layers += [GlobalAvgPool(), Dense("fc", classes, init="he")]
    return ModelSpec(
        "resnet-50-cifar" if cifar else "resnet-50", tuple(layers),
        InputSpec("image", (3, image_size, image_size), classes=classes), CE,
        source=LIU if cifar else SHI, description="ResNet-50" + (" (CIFAR-10)" if cifar else " (ImageNet)"),
        default_batch=128 if cifar else 16, learning_rate=0.1 if cifar else 0.01,
    )


def resnet_50_cifar(image_size: int = 32, classes: int = 10) -> ModelSpec:
    return resnet_50(image_size, classes, cifar=True)


def lstm_ptb(vocab: int = 10000, embed: int = 256, units: int = 256, layers: int = 2,
             seq_len: int = 32) -> ModelSpec:
    """Shi et al.'s PTB language model: a softmax over the vocabulary at every step."""
    stack: list[Layer] = [Embedding("embed", vocab, embed)]
    stack += [LSTM(f"lstm{i}", units) for i in range(1, layers + 1)]
    stack.append(Dense("fc", vocab))
    return ModelSpec(
        "lstm-ptb", tuple(stack), InputSpec("tokens", (seq_len,), labels="sequence", classes=vocab, vocab=vocab),
        CE, source=SHI, description="LSTM language model (PTB)", default_batch=128, learning_rate=1.0,
    )


# --- transformers ------------------------------------------------------------------------------------
BERT = "Devlin et al. 2019 (bert-base-uncased); sequence 384 is MLPerf Inference's BERT shape"
GPT2 = "Radford et al. 2019 (Hugging Face gpt2, 124M)"
VIT = "Dosovitskiy et al. 2021 (google/vit-base-patch16-224)"
SMOLLM2 = "Allal et al. 2025 (HuggingFaceTB/SmolLM2-135M config.json)"


def _fits(seq_len: int, max_positions: int) -> None:
    if not 1 <= seq_len <= max_positions:
        raise ValueError(f"seq_len {seq_len} must be 1 to the model's {max_positions} positions")


def _mlp(name: str, dim: int, hidden: int, approximate: str) -> tuple[Layer, ...]:
    return (Dense(f"{name}.fc", hidden), GELU(approximate), Dense(f"{name}.proj", dim))


def _gelu(form: str) -> str:
    if form not in ("none", "tanh"):
        raise ValueError(f"gelu must be none (exact) or tanh, got {form!r}")
    return form


def _lm_head(embedding: str, vocab: int, tied: bool) -> Layer:
    """The LM head: tied to the token embedding, or (``tied`` false, as some Hugging Face checkpoints
    have it) a bias-free dense layer of its own named ``lm_head``."""
    return LMHead(embedding, vocab) if tied else Dense("lm_head", vocab, bias=False)


def bert_base(seq_len: int = 128, vocab: int = 30522, dim: int = 768, layers: int = 12, heads: int = 12,
              max_positions: int = 512, classes: int = 2, hidden: int = 0, eps: float = 1e-12,
              gelu: str = "none", types: int = 2) -> ModelSpec:
    """BERT-base encoder with its pooler and a classification head: word, position and (one-segment)
    token-type embeddings, post-norm blocks (LayerNorm eps 1e-12), exact GELU, the [CLS] token's
    tanh pooler. Reviews-style inputs: padded to the longest in the batch, attention masked.
    109,482,240 parameters without the head (BertModel), + 768 x classes + classes. No dropout.
    ``hidden`` (the MLP's width, 0: 4 x dim), ``eps``, ``gelu`` and ``types`` (token types) are what a
    Hugging Face config may set otherwise (:mod:`dlbench.models.hf_checkpoint`)."""
    _fits(seq_len, max_positions)
    stack: list[Layer] = [Embedding("word", vocab, dim), PositionEmbedding("position", max_positions, dim),
                          SegmentEmbedding("token_type", types, dim), LayerNorm("embed_ln", eps)]
    for i in range(layers):
        stack += [SkipBlock((Attention(f"l{i}.attn", heads),), (LayerNorm(f"l{i}.attn_ln", eps),)),
                  SkipBlock(_mlp(f"l{i}.mlp", dim, hidden or 4 * dim, _gelu(gelu)), (LayerNorm(f"l{i}.mlp_ln", eps),))]
    stack += [TakeToken(0), Dense("pooler", dim), Activation("tanh"), Dense("classifier", classes)]
    return ModelSpec(
        "bert-base", tuple(stack),
        InputSpec("tokens", (seq_len,), classes=classes, vocab=vocab, variable_length=True,
                  min_length=max(1, seq_len // 4)),
        CE, source=BERT, description="BERT-base encoder, sequence classification", default_batch=8,
        learning_rate=1e-4,
    )


def gpt2(seq_len: int = 256, vocab: int = 50257, dim: int = 768, layers: int = 12, heads: int = 12,
         max_positions: int = 1024, hidden: int = 0, eps: float = 1e-5, gelu: str = "tanh",
         tied: bool = True) -> ModelSpec:
    """GPT-2 small: learned positions, pre-norm blocks (LayerNorm eps 1e-5), causal attention, tanh
    GELU, a final LayerNorm and the LM head tied to the token embedding. 124,439,808 parameters.
    Loss: next-token cross-entropy, mean over steps (the targets are the inputs shifted by one in
    a token stream; random ids on synthetic data). No dropout. ``hidden`` (0: 4 x dim), ``eps``,
    ``gelu`` and ``tied`` (false: a head of its own, :func:`_lm_head`) are what a Hugging Face config
    may set otherwise."""
    _fits(seq_len, max_positions)
    stack: list[Layer] = [Embedding("wte", vocab, dim), PositionEmbedding("wpe", max_positions, dim)]
    for i in range(layers):
        stack += [SkipBlock((LayerNorm(f"h{i}.ln1", eps), Attention(f"h{i}.attn", heads, causal=True))),
                  SkipBlock((LayerNorm(f"h{i}.ln2", eps), *_mlp(f"h{i}.mlp", dim, hidden or 4 * dim, _gelu(gelu))))]
    stack += [LayerNorm("ln_f", eps), _lm_head("wte", vocab, tied)]
    return ModelSpec(
        "gpt2", tuple(stack), InputSpec("tokens", (seq_len,), labels="sequence", classes=vocab, vocab=vocab),
        CE, source=GPT2, description="GPT-2 124M decoder, language model", default_batch=8, learning_rate=1e-4,
    )


def vit_b16(image_size: int = 224, patch: int = 16, dim: int = 768, layers: int = 12, heads: int = 12,
            classes: int = 1000, hidden: int = 0, eps: float = 1e-12, gelu: str = "none",
            channels: int = 3) -> ModelSpec:
    """ViT-B/16: 16x16 patches, a class token and learned positions, pre-norm blocks (LayerNorm eps
    1e-12), exact GELU, the class token's final LayerNorm into the head. 86,567,656 parameters at
    224x224 and 1000 classes. No dropout. ``hidden`` (0: 4 x dim), ``eps``, ``gelu`` and ``channels``
    are what a Hugging Face config may set otherwise."""
    tokens = 1 + (image_size // patch) ** 2
    stack: list[Layer] = [PatchEmbed("patch", dim, patch), PositionEmbedding("position", tokens, dim)]
    for i in range(layers):
        stack += [SkipBlock((LayerNorm(f"l{i}.ln1", eps), Attention(f"l{i}.attn", heads))),
                  SkipBlock((LayerNorm(f"l{i}.ln2", eps), *_mlp(f"l{i}.mlp", dim, hidden or 4 * dim, _gelu(gelu))))]
    stack += [LayerNorm("ln", eps), TakeToken(0), Dense("head", classes)]
    return ModelSpec(
        "vit-b16", tuple(stack), InputSpec("image", (channels, image_size, image_size), classes=classes), CE,
        source=VIT, description="ViT-B/16 (ImageNet)", default_batch=16, learning_rate=1e-4,
    )


def smollm2_135m(seq_len: int = 256, vocab: int = 49152, dim: int = 576, layers: int = 30, heads: int = 9,
                 kv_heads: int = 3, head_dim: int = 64, hidden: int = 1536, rope_theta: float = 100000.0,
                 eps: float = 1e-5, max_positions: int = 8192, tied: bool = True, bias: bool = False) -> ModelSpec:
    """SmolLM2-135M, the Llama architecture as published: RMSNorm (eps 1e-5), grouped-query
    attention (9 heads, 3 key/value heads, head dim 64, no biases) with RoPE (theta 100000), SwiGLU
    MLP 1536, LM head tied to the embedding. 134,515,008 parameters. Next-token cross-entropy. Its
    context, 8192 positions (``max_position_embeddings``), is in ``options["context"]`` (rotary
    positions have no table that says it). ``tied`` (false: a head of its own) and ``bias`` (attention
    biases) are what a Hugging Face config (Llama, Qwen2) may set otherwise."""
    _fits(seq_len, max_positions)
    stack: list[Layer] = [Embedding("embed", vocab, dim)]
    for i in range(layers):
        stack += [SkipBlock((RMSNorm(f"l{i}.attn_norm", eps),
                             Attention(f"l{i}.attn", heads, kv_heads, head_dim, causal=True, rope_theta=rope_theta,
                                       bias=bias))),
                  SkipBlock((RMSNorm(f"l{i}.mlp_norm", eps), SwiGLU(f"l{i}.mlp", hidden)))]
    stack += [RMSNorm("norm", eps), _lm_head("embed", vocab, tied)]
    return ModelSpec(
        "smollm2-135m", tuple(stack), InputSpec("tokens", (seq_len,), labels="sequence", classes=vocab, vocab=vocab),
        CE, source=SMOLLM2, description="SmolLM2-135M (Llama) decoder, language model", default_batch=8,
        learning_rate=1e-4, options={"context": max_positions},
    )


# --- probes: one operation each, what `dlbench probe` times in every framework ----------------------
def gemm(inputs: int = 2048, units: int = 4096) -> ModelSpec:
    """One dense layer: at batch 1024 it is fcn-r's largest multiply (1024 x 2048 @ 2048 x 4096)."""
    return ModelSpec("gemm", (Dense("fc", units, bias=False),), InputSpec("vector", (inputs,), classes=units), CE,
                     source=PROBE, description=f"one {inputs}x{units} matrix multiply (GEMM)", default_batch=1024)


def conv(image_size: int = 56, channels: int = 64, kernel: int = 3) -> ModelSpec:
    """One 3x3 convolution, 64 -> 64 channels at 56x56 (a ResNet stage-1 layer), then a global average
    pool so the output is a class vector (a negligible share of the FLOPs)."""
    return ModelSpec("conv", (Conv2d("conv", channels, kernel, padding=kernel // 2, bias=False), GlobalAvgPool()),
                     InputSpec("image", (channels, image_size, image_size), classes=channels), CE,
                     source=PROBE, description=f"one {kernel}x{kernel} convolution, {channels} channels", default_batch=16)


def dense_1() -> ModelSpec:
    """The smallest step a framework can take: one 1-unit dense layer on one input at batch 1,
    trained to reproduce its input. Its time is the framework's per-call overhead (dispatch,
    Python, allocation), not its kernels."""
    return ModelSpec("dense-1", (Mark("target"), Dense("fc", 1)), InputSpec("vector", (1,), labels="none"),
                     LossSpec("mse", "target"), source=PROBE, description="one 1-unit dense layer (per-call overhead)",
                     default_batch=1)


def _renamed(spec: ModelSpec, name: str, source: str | None = None, description: str | None = None,
             default_batch: int | None = None) -> ModelSpec:
    from dataclasses import replace

    return replace(spec, name=name, source=source or spec.source, description=description or spec.description,
                   default_batch=default_batch or spec.default_batch)
