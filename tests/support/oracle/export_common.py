"""Shared by export_resnet.py and small_cnn.py: safetensors writing (format written by hand:
u64 little-endian header length, JSON header padded with spaces to 8 bytes, raw little-endian data,
tensors in state_dict order), and the reference computations kiln's model parity tests compare
against. A test oracle only; kiln never depends on it.

Files written to OUT by export(model, ...):
  model.safetensors         initial state_dict (parameters and BN buffers, torch names;
                            num_batches_tracked as I64)
  input.npy, labels.npy     the batch: float32 (float64 with --dtype float64) (N, C, H, W), int64 (N,)
  forward.safetensors       eval.logits, eval.loss (model.eval()), train.logits, train.loss
                            (model.train(): BN uses batch statistics), cross_entropy loss, mean
  grads.safetensors         d train.loss / d parameter, for every parameter (torch names); with
                            --backward-bn eval, of the loss with BN in eval mode
  train_buffers.safetensors BN buffers after the train-mode forward (running stats updated)
  after_sgd.safetensors     state_dict after one SGD step (lr, momentum, weight_decay, from the
                            initial weights, train-mode forward + backward)
  after_adamw.safetensors   state_dict after one AdamW step (lr, betas (0.9, 0.999), eps 1e-8,
                            weight_decay)
  config.json               every argument, torch version, and the file list
--dtype float64 runs everything (weights, batch, references) in float64: the f64 references tell a
formula error (f64 still disagrees) from f32 roundoff (f64 agrees to ~1e-10).
--backward-bn eval computes the gradients and both optimizer steps with BatchNorm in eval mode
(running statistics; the train-mode logits, loss and BN buffers are still the train-mode ones), and
for float32 exports records in config.json how far that float32 gradient is from the same
computation in float64 ("f32_grad_err", normwise per tensor, worst).
config.json's "f32_eval_logits_err" (float32 exports) is how far torch's own float32 eval logits are
from the same computation in float64 (normwise): how well conditioned the float32 comparison is.
Dropout: train-mode references are computed with every Dropout's p set to 0 unless --keep-dropout
(kiln's Philox stream is not torch's, so a random mask cannot match); BN still runs in train mode.
"""
import copy
import json
import struct
import sys

sys.path[:] = [p for p in sys.path if not p.startswith("/usr/local/lib/python3")]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ST_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8"}


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, named, metadata=None):
    """named: list of (name, tensor) in the order to lay them out."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, offset = [], 0
    for name, t in named:
        raw = tensor_bytes(t)
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def add_common_args(p, channels, size, batch, classes):
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--seed", type=int, default=0, help="seeds weights (torch.manual_seed) and the batch")
    p.add_argument("--num-classes", type=int, default=classes)
    p.add_argument("--batch", type=int, default=batch, help="N of the input batch")
    p.add_argument("--channels", type=int, default=channels, help="C of the input batch")
    p.add_argument("--size", type=int, default=size, help="H = W of the input batch")
    p.add_argument("--lr", type=float, default=0.1, help="learning rate of both reference steps")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--weight-decay", type=float, default=1e-4, help="SGD and AdamW weight decay")
    p.add_argument("--adamw-lr", type=float, default=None, help="AdamW learning rate (default: --lr / 100)")
    p.add_argument("--keep-dropout", action="store_true", help="leave Dropout on in train-mode references")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="dtype of the weights, the batch and every reference")
    p.add_argument("--backward-bn", choices=["train", "eval"], default="train",
                   help="BatchNorm mode of the gradients and the optimizer steps")


def _no_dropout(model):
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return model


def _train_step(model, x, y, opt_factory, bn_eval=False):
    model.train()
    if bn_eval:
        model.eval()
    opt = opt_factory(model.parameters())
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return model


def export(model, args, extra_config):
    """Writes every reference file for `model` (already built from args.seed) into args.out."""
    import os
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch, args.channels, args.size, args.size, generator=gen)
    y = torch.randint(0, args.num_classes, (args.batch,), generator=gen, dtype=torch.int64)
    if args.dtype == "float64":  # same draws as float32, then widened
        x = x.double()
        model = model.double()
    np.save(f"{args.out}/input.npy", x.numpy())
    np.save(f"{args.out}/labels.npy", y.numpy())
    init = copy.deepcopy(model)
    meta = {"seed": args.seed, "num_classes": args.num_classes}
    write_safetensors(f"{args.out}/model.safetensors", list(init.state_dict().items()), meta)

    ref = lambda: copy.deepcopy(init) if args.keep_dropout else _no_dropout(copy.deepcopy(init))  # noqa: E731

    m = copy.deepcopy(init).eval()
    with torch.no_grad():
        eval_logits = m(x)
        eval_loss = F.cross_entropy(eval_logits, y)
        f32_eval_logits_err = None
        if x.dtype == torch.float32:
            ref64 = copy.deepcopy(init).double().eval()(x.double())
            f32_eval_logits_err = float((eval_logits.double() - ref64).abs().max() / ref64.abs().max())

    mt = m = ref().train()
    train_logits = m(x)
    train_loss = F.cross_entropy(train_logits, y)
    train_loss.backward()
    bn_eval = args.backward_bn == "eval"
    f32_grad_err = None
    if bn_eval:  # the gradients with BN in eval mode (and in float64, to measure the conditioning)
        grads = {}
        for dt in (torch.float64, x.dtype):
            m = ref().to(dt).eval()
            F.cross_entropy(m(x.to(dt)), y).backward()
            grads[dt] = {n: p.grad.double() for n, p in m.named_parameters()}
        if x.dtype == torch.float32:
            f32_grad_err = max(float((g - grads[torch.float64][n]).abs().max() / grads[torch.float64][n].abs().max())
                               for n, g in grads[torch.float32].items())
    write_safetensors(f"{args.out}/forward.safetensors", [
        ("eval.logits", eval_logits), ("eval.loss", eval_loss.detach()),
        ("train.logits", train_logits.detach()), ("train.loss", train_loss.detach())])
    write_safetensors(f"{args.out}/grads.safetensors", [(n, p.grad) for n, p in m.named_parameters()])
    write_safetensors(f"{args.out}/train_buffers.safetensors", list(mt.named_buffers()))

    sgd = _train_step(ref(), x, y, lambda ps: torch.optim.SGD(ps, lr=args.lr, momentum=args.momentum,
                                                               weight_decay=args.weight_decay), bn_eval)
    write_safetensors(f"{args.out}/after_sgd.safetensors", list(sgd.state_dict().items()))
    adamw_lr = args.adamw_lr if args.adamw_lr is not None else args.lr / 100
    adamw = _train_step(ref(), x, y, lambda ps: torch.optim.AdamW(ps, lr=adamw_lr, betas=(0.9, 0.999), eps=1e-8,
                                                                   weight_decay=args.weight_decay), bn_eval)
    write_safetensors(f"{args.out}/after_adamw.safetensors", list(adamw.state_dict().items()))

    config = dict(vars(args))
    config.update(extra_config)
    config.update({"adamw_lr": adamw_lr, "torch": torch.__version__, "f32_eval_logits_err": f32_eval_logits_err,
                   "f32_grad_err": f32_grad_err,
                   "eval_loss": float(eval_loss), "train_loss": float(train_loss),
                   "files": ["model.safetensors", "input.npy", "labels.npy", "forward.safetensors",
                             "grads.safetensors", "train_buffers.safetensors", "after_sgd.safetensors",
                             "after_adamw.safetensors"]})
    with open(f"{args.out}/config.json", "w") as f:
        json.dump(config, f, indent=1)
    return config
