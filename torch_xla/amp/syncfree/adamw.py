import torch

from .adam import adam_family_step


class AdamW(torch.optim.AdamW):
    """torch.optim.AdamW whose `step(closure=None, found_inf=None)` skips the
    update in the graph when the 0-dim device tensor found_inf is nonzero."""

    @torch.no_grad()
    def step(self, closure=None, found_inf=None):
        if found_inf is None:
            return super().step(closure=closure)
        return adam_family_step(self, closure, found_inf, use_adamw=True)
