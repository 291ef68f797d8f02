# ruff: noqa: F401, I001 - this module re-exports the IR API
"""The loop-level IR: expressions, statements, buffers, PrimFunc, intrinsics, and its passes."""

from tessera.ir.dtype import DType
from tessera.tir.buffer import Buffer, decl_buffer
from tessera.tir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    CmpOp,
    CommReducer,
    Div,
    Expr,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    IterVar,
    IterVarType,
    Let,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    Ramp,
    Range,
    Reduce,
    Select,
    StringImm,
    Sub,
    Var,
    const,
    convert,
    promote_types,
)
from tessera.tir.function import PrimFunc
from tessera.tir.op import *  # noqa: F403 - the intrinsic helpers are part of this namespace
from tessera.tir.stmt import (
    Allocate,
    AttrStmt,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    SeqStmt,
    Stmt,
    seq,
)
from tessera.tir.stmt_functor import collect, free_vars, substitute
from tessera.tir import printer as _printer  # registers str() of tir nodes
from tessera.tir.parser import parse_expr, parse_prim_func, parse_stmt
from tessera.tir.verify import VerifyError, verify
