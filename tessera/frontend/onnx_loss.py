"""ONNX converters for the loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

    loss[n, d...] = -input[n, target[n, d...], d...] * weight[target[n, d...]]
    (0 where target == ignore_index); reduction "none" | "sum" | "mean" (weighted mean)

in graph ops (gather_elements on the class axis), following onnx.reference.
"""

from __future__ import annotations

from tessera.frontend.onnx_registry import NodeError, onnx_op


def _nll(b, x, target, weight, reduction, ignore_index):
    shape = b.shape_of(x)
    if len(shape) < 2:
        raise NodeError(f"input must have rank >= 2 (N, C, ...), got {x.type}")
    if reduction not in ("none", "sum", "mean"):
        raise NodeError(f"unknown reduction {reduction!r}")
    keep = None
    index = target
    if ignore_index is not None:
        keep = b.call("logical_not", b.call("equal", target, b.scalar(ignore_index, target)))
        index = b.call("where", keep, target, b.scalar(0, target))
    t_shape = b.shape_of(target)
    picked = b.call("gather_elements", x, b.reshape(index, (shape[0], 1, *t_shape[1:])), axis=1)
    loss = b.call("negative", b.reshape(picked, t_shape))
    w = None if weight is None else b.call("gather", weight, index, axis=0)
    if keep is not None:
        mask = b.call("cast", keep, dtype=x.type.dtype)
        w = mask if w is None else b.call("multiply", w, mask)
    if w is not None:
        loss = b.call("multiply", loss, w)
    if reduction == "none":
        return loss
    total = b.call("sum", loss, axis=None, keepdims=False)
    if reduction == "sum":
        return total
    if w is None:
        count = b.scalar(int(loss.type.size), total)
    else:
        count = b.call("sum", w, axis=None, keepdims=False)
    return b.call("divide", total, count)


@onnx_op("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(b, input, target, weight=None, *, ignore_index=None,
                                 reduction="mean"):  # fmt: skip
    return _nll(b, input, target, weight, reduction, ignore_index)


@onnx_op("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(b, scores, labels, weights=None, *, ignore_index=None,
                               reduction="mean"):  # fmt: skip
    log_prob = b.call("nn.log_softmax", scores, axis=1)
    loss = _nll(b, log_prob, labels, weights, reduction, ignore_index)
    return (loss, log_prob) if b.num_outputs > 1 else loss
