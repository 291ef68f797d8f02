"""ONNX-ML TreeEnsemble against onnx.reference: every comparison mode, set membership,
missing values, the aggregations and post-transforms, compiled."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tessera.frontend import onnx_backend


def _model(aggregate, post, n_targets=3):
    # tree 0: node 0 (x0 <= 0.5) -> node 1 (x1 member {1, 2}) / node 2 (x2 > -1, NaN true)
    #         node 1 -> leaf 0 / leaf 1; node 2 -> leaf 2 / node 3 (x0 != 2) -> leaf 3 / leaf 4
    # tree 1: node 4 (x1 < 0) -> leaf 5 / node 5 (x2 >= 0.25) -> leaf 6 / leaf 7
    # tree 2: node 6 (x0 == 3) -> leaf 8 / leaf 9
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=n_targets,
        aggregate_function=aggregate, post_transform=post, tree_roots=[0, 4, 6],
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, (7,), [0, 6, 3, 5, 1, 2, 4]),
        nodes_featureids=[0, 1, 2, 0, 1, 2, 0],
        nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, (7,),
                                        [0.5, 0, -1, 2, 0, 0.25, 3]),
        nodes_truenodeids=[1, 0, 2, 3, 5, 6, 8], nodes_trueleafs=[0, 1, 1, 1, 1, 1, 1],
        nodes_falsenodeids=[2, 1, 3, 4, 5, 7, 9], nodes_falseleafs=[0, 1, 0, 1, 0, 1, 1],
        nodes_missing_value_tracks_true=[0, 0, 1, 0, 0, 0, 0],
        membership_values=helper.make_tensor("mv", TensorProto.FLOAT, (3,), [1, 2, np.nan]),
        leaf_targetids=[0, 1, 2, 0, 1, 2, 0, 1, 2, 0],
        leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, (10,),
                                        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
    )  # fmt: skip
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n_targets])],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid("ai.onnx.ml", 5)])


@pytest.mark.parametrize("aggregate,post", [(1, 0), (0, 2), (2, 0), (3, 0)])
def test_tree_ensemble_matches_onnx_reference(aggregate, post):
    x = np.array([[0.0, 1.0, 0.0], [0.0, 3.0, 5.0], [1.0, -1.0, np.nan], [2.0, 0.5, -3.0],
                  [3.0, 2.0, 0.25], [0.5, 0.0, -1.0]], np.float32)  # fmt: skip
    model = _model(aggregate, post)
    want = ReferenceEvaluator(model).run(None, {"X": x})[0]
    if post == 2:  # the reference leaves post transforms out; the spec's logistic
        want = 1 / (1 + np.exp(-want))
    got = onnx_backend.prepare(model).run({"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
