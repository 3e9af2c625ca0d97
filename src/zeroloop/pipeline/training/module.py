"""The LightningModule that trains a :class:`PolicyValueNet` with the AlphaZero loss.

Per sample, with network output (p, v) and targets (pi, z)::

    l = (z - v)^2 - pi . log p + c ||theta||^2

``pi`` is the MCTS visit distribution and ``z`` the value target from the side
to move: the game result, or its mix with the root search value
(``train.value_q_weight``). The L2 term is added explicitly (``c`` is
``train.l2``) over every weight, or over convolution and linear weights only
(``train.decay_norm_and_bias: false``); with plain SGD this equals weight decay
``2c``. ``adamw`` adds decoupled weight decay over the same parameters.
"""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from zeroloop.engine.games import Game
from zeroloop.engine.nn.net import PolicyValueNet
from zeroloop.pipeline.training.config import TrainConfig
from zeroloop.pipeline.training.replay import ReplayData, SymmetryAugment


def decayed_parameters(net: torch.nn.Module, norm_and_bias: bool) -> list[torch.Tensor]:
    """The parameters that ``l2`` and AdamW's weight decay shrink: all of them,
    or (``norm_and_bias`` false) only convolution and linear weights, the
    tensors of two or more dimensions."""
    return [p for p in net.parameters() if norm_and_bias or p.ndim > 1]


def alphazero_loss(logits: torch.Tensor, value: torch.Tensor, pi: torch.Tensor, z: torch.Tensor,
                   params: list[torch.Tensor], l2: float) -> dict[str, torch.Tensor]:
    """logits ``[B, A]``, value ``[B]``, pi ``[B, A]``, z ``[B]``: the batch-mean
    value and policy terms, the L2 term and their sum (``loss``)."""
    value_loss = F.mse_loss(value, z)
    policy_loss = -(pi * F.log_softmax(logits, dim=1)).sum(dim=1).mean()
    l2_term = l2 * sum((p * p).sum() for p in params) if l2 else torch.zeros((), device=value.device)
    return {"loss": value_loss + policy_loss + l2_term, "value_loss": value_loss,
            "policy_loss": policy_loss, "l2": l2_term}


class WeightAverage:
    """An exponential moving average of a module's state: its parameters and
    floating-point buffers (BatchNorm's running statistics) are averaged, the
    others (step counters) copied. ``update`` after each optimiser step;
    ``copy_to`` puts the average into a module of the same shape. The decay
    warms up as ``min(decay, (1 + t) / (10 + t))``."""

    def __init__(self, net: torch.nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"train.ema_decay={decay}: must lie in (0, 1) for an average")
        self.decay, self.steps = decay, 0
        self.state = {k: v.detach().clone() for k, v in net.state_dict().items()}

    def rate(self) -> float:
        """The decay the next update uses."""
        t = self.steps + 1
        return min(self.decay, (1 + t) / (10 + t))

    @torch.no_grad()
    def update(self, net: torch.nn.Module) -> None:
        d = self.rate()
        self.steps += 1
        for k, v in net.state_dict().items():
            avg = self.state[k]
            if avg.dtype.is_floating_point:
                avg.mul_(d).add_(v.detach().to(avg.device), alpha=1.0 - d)
            else:
                avg.copy_(v)

    def copy_to(self, net: torch.nn.Module) -> None:
        net.load_state_dict(self.state)


class ReplayDataModule(pl.LightningDataModule):
    """Shuffled batches of the replay window with a held-out validation part."""

    def __init__(self, data: ReplayData, *, batch_size: int, val_fraction: float, seed: int,
                 q_weight: float = 0.0) -> None:
        super().__init__()
        n = len(data)
        g = np.random.default_rng(seed)
        order = g.permutation(n)
        n_val = int(round(n * val_fraction)) if n > 10 else 0
        self.val_idx, self.train_idx = order[:n_val], order[n_val:]
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.value = data.value_target(q_weight)

    def _dataset(self, idx: np.ndarray) -> TensorDataset:
        d = self.data
        columns = [d.planes[idx], d.policy[idx], self.value[idx]]
        return TensorDataset(*(torch.from_numpy(c) for c in columns))

    def train_dataloader(self) -> DataLoader:
        gen = torch.Generator().manual_seed(self.seed)
        return DataLoader(self._dataset(self.train_idx), batch_size=self.batch_size, shuffle=True,
                          generator=gen, drop_last=len(self.train_idx) > self.batch_size)

    def val_dataloader(self) -> DataLoader | list:
        if len(self.val_idx) == 0:
            return []
        return DataLoader(self._dataset(self.val_idx), batch_size=max(self.batch_size, 512))


class AlphaZeroModule(pl.LightningModule):
    """Owns the loss, the augmentation and the optimiser; the net stays a plain module."""

    def __init__(self, net: PolicyValueNet, game: Game, optim: TrainConfig, seed: int = 0) -> None:
        super().__init__()
        self.net, self.optim = net, optim
        self.augment = SymmetryAugment(game) if optim.augment and len(game.symmetries()) > 1 else None
        self._gen = torch.Generator().manual_seed(seed)
        self._decayed = decayed_parameters(net, optim.decay_norm_and_bias)
        self.average: WeightAverage | None = None  # made on the training device when fitting starts
        # fit_network keeps NCHW on a GPU and for a net without convolutions (channels_last_on)
        self.channels_last = optim.channels_last and net.convolutional
        # no save_hyperparameters: the parent MLflow run holds every param, and a
        # rerun into the same generation run may not change logged params

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net(x)

    def _step(self, batch, stage: str) -> torch.Tensor:
        planes, pi, z = batch
        if stage == "train" and self.augment is not None:
            planes, pi = self.augment.random(planes, pi, self._gen)
        if self.channels_last:
            planes = planes.contiguous(memory_format=torch.channels_last)
        logits, value = self.net(planes)
        parts = alphazero_loss(logits, value, pi, z, self._decayed, self.optim.l2)
        with torch.no_grad():
            # the policy's entropy floor: cross-entropy minus this is the KL to the target
            target_entropy = -(pi * torch.log(pi.clamp_min(1e-12))).sum(1).mean()
        on_step = stage == "train"
        self.log_dict({f"{stage}/{k}": v for k, v in parts.items()}, on_step=on_step, on_epoch=True,
                      prog_bar=False, batch_size=len(z))
        self.log(f"{stage}/policy_kl", parts["policy_loss"] - target_entropy, on_step=False,
                 on_epoch=True, batch_size=len(z))
        return parts["loss"]

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "val")

    def on_train_start(self) -> None:
        if self.optim.ema_decay > 0:
            self.average = WeightAverage(self.net, self.optim.ema_decay)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self.average is not None:
            self.average.update(self.net)

    def configure_optimizers(self):
        o = self.optim  # its Literal fields are checked: no value falls through to a default here
        params = list(self.net.parameters())
        if o.optimizer == "sgd":
            opt = torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=0)
        elif o.optimizer == "adam":
            opt = torch.optim.Adam(params, lr=o.lr, weight_decay=0)
        elif o.optimizer == "adamw":
            decayed = {id(p) for p in self._decayed}
            groups = [{"params": [p for p in params if id(p) in decayed], "weight_decay": o.weight_decay},
                      {"params": [p for p in params if id(p) not in decayed], "weight_decay": 0.0}]
            opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=o.lr)
        else:
            raise ValueError(f"train.optimizer={o.optimizer!r}: must be adam, adamw or sgd")
        if o.lr_schedule == "constant":
            return opt
        if o.lr_schedule == "cosine":
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, o.epochs),
                                                               eta_min=o.lr * 0.05)
        elif o.lr_schedule == "step":
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=o.lr_step_epochs, gamma=o.lr_step_gamma)
        else:
            raise ValueError(f"train.lr_schedule={o.lr_schedule!r}: must be constant, cosine or step")
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


def lightning_device(device: str) -> tuple[str, int | list[int]]:
    """Lightning's (accelerator, devices) for our device strings."""
    if device == "auto":
        return ("gpu", 1) if torch.cuda.is_available() else ("cpu", 1)
    if device == "cpu":
        return "cpu", 1
    if device.startswith("cuda"):
        index = device.partition(":")[2]
        return "gpu", [int(index)] if index else 1
    raise ValueError(f"device {device!r}: expected auto, cpu or cuda[:N]")


def channels_last_on(optim: TrainConfig, accelerator: str, net: PolicyValueNet | None = None) -> bool:
    """Whether training runs channels-last: ``train.channels_last`` on the CPU, where
    oneDNN's convolutions run faster in it; never on a GPU, where cuDNN ran the 5x64 net's
    raw training loop at 0.64x NCHW's speed on an H100 (docs/lab/gpu-loans.md), nor for a ``net``
    without convolutions (an MLP flattens the planes: the layout would only cost a copy)."""
    return optim.channels_last and accelerator == "cpu" and (net is None or net.convolutional)


def fit_network(net: PolicyValueNet, game: Game, data: ReplayData, optim: TrainConfig, *, seed: int = 0,
                device: str = "auto", logger=False, progress: bool = True) -> dict[str, float]:
    """Train ``net`` in place on ``data`` with the real Lightning trainer
    (``optim.epochs`` epochs of ``optim.batch_size`` positions, ``optim.val_fraction``
    held out); returns the last epoch's mean losses (of the trained weights,
    not of their average where ``optim.ema_decay`` makes one the result)."""
    pl.seed_everything(seed, workers=True, verbose=False)
    net.train()  # Lightning keeps the modes it finds; BatchNorm must train
    module = AlphaZeroModule(net, game, optim, seed=seed)
    dm = ReplayDataModule(data, batch_size=optim.batch_size, val_fraction=optim.val_fraction, seed=seed,
                          q_weight=optim.value_q_weight)
    accelerator, devices = lightning_device(device)
    module.channels_last = channels_last_on(optim, accelerator, net)
    if module.channels_last:
        net.to(memory_format=torch.channels_last)
    trainer = pl.Trainer(
        max_epochs=optim.epochs, accelerator=accelerator, devices=devices, logger=logger,
        enable_checkpointing=False, enable_progress_bar=progress, enable_model_summary=False,
        log_every_n_steps=10, num_sanity_val_steps=0, deterministic=True)
    trainer.fit(module, datamodule=dm)
    if module.average is not None:
        module.average.copy_to(net)  # the candidate is the average (train.ema_decay)
    net.to(memory_format=torch.contiguous_format).cpu().eval()  # stored, exported and searched as NCHW
    return {k: float(v) for k, v in trainer.callback_metrics.items() if "_epoch" in k or k.startswith("val/")}
