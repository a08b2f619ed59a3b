WRONG_ANSWERS = {
    "dp-counting": {
        "counts every device, whatever the batch": """
class CountingDataParallel(lp.DataParallel):
    def forward(self, *inputs, **kwargs):
        self.replicas_used.append(len(self.device_ids))
        return super().forward(*inputs, **kwargs)
""",
        "counts the replicas made, not the calls (overrides scatter)": """
class CountingDataParallel(lp.DataParallel):
    def scatter(self, inputs, kwargs, device_ids):
        self.replicas_used.append(len(device_ids))
        return super().scatter(inputs, kwargs, device_ids)
""",
    },
    "dp-equivalence": {
        "compares the same gradient tensors twice": """
def same_gradients(model, x, y):
    model.zero_grad()
    nn.functional.mse_loss(lp.DataParallel(model)(x), y).backward()
    parallel = [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=False)
    nn.functional.mse_loss(model(x), y).backward()
    return all(torch.allclose(a, p.grad, atol=1e-6) for a, p in zip(parallel, model.parameters()))
""",
        "never clears the gradients": """
def same_gradients(model, x, y):
    nn.functional.mse_loss(lp.DataParallel(model)(x), y).backward()
    parallel = [p.grad.clone() for p in model.parameters()]
    nn.functional.mse_loss(model(x), y).backward()
    return all(torch.allclose(a, p.grad, atol=1e-6) for a, p in zip(parallel, model.parameters()))
""",
    },
}
