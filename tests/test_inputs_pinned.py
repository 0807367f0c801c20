"""The bytes a seed gives are pinned: a faster make_inputs must give the same data.

Each case hashes every array of a small seeded problem (q, int8 K/V, scales, the float K/V,
the paged pool and its table) and p_scale. The digests were taken from the code before the
generation was optimised (commit of this file); a change here means a seed's data changed,
which breaks every stored run's reproducibility: do not update them to make a test pass.
"""

import hashlib

import numpy as np
import pytest

from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape


def _digest(a) -> str:
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()[:16]


def digests(inp) -> dict[str, str]:
    out = {name: _digest(getattr(inp, name))
           for name in ("q", "k_i8", "v_i8", "k_scale", "v_scale", "k_float", "v_float")}
    if inp.paged is not None:
        for name in ("k_pool", "v_pool", "k_scale_pool", "v_scale_pool", "page_table"):
            out[name] = _digest(getattr(inp.paged, name))
    out["p_scale"] = repr(inp.p_scale)
    return out


def _capture(path) -> str:
    rng = np.random.default_rng(1234)
    np.savez(path, q=rng.standard_normal((4, 40, 64)).astype(np.float32),
             k=(3 * rng.standard_normal((2, 240, 64))).astype(np.float32),
             v=rng.standard_normal((2, 240, 64)).astype(np.float32))
    return str(path)


CASES = {
    "normal-paged": dict(shape="1023x113", data="normal", layout="paged"),
    "normal-contiguous": dict(shape="1023x113", data="normal", layout="contiguous"),
    "realistic-paged": dict(shape="1023x113", data="realistic", layout="paged"),
    "realistic-contiguous": dict(shape="1023x113", data="realistic", layout="contiguous"),
    "realistic-d128-group3": dict(shape="300x50", data="realistic", layout="paged", heads_q=6,
                                  heads_kv=2, head_dim=128, page=64, seed=5),
    "normal-first-chunk": dict(shape="0x96", data="normal", layout="paged", seed=3),
    "npz-paged": dict(shape="200x40", data="npz", layout="paged"),
}

PINNED = {'normal-contiguous': {'q': 'bcbf303d56727b49',
                                'k_i8': 'efe84223001aa95d',
                                'v_i8': 'adf83bdafc3bf155',
                                'k_scale': 'ca8cbabfdbdf820d',
                                'v_scale': '10b1bca6d34fe5da',
                                'k_float': '992e9c5ae8afa085',
                                'v_float': '408294bc7585ebd3',
                                'p_scale': '16.0'},
          'normal-first-chunk': {'q': 'e050be0687e3f5b0',
                                 'k_i8': '5346519790bafc04',
                                 'v_i8': '51e4c35fb489a780',
                                 'k_scale': '8c63cfa16c19d587',
                                 'v_scale': 'd6fe9784433b93a0',
                                 'k_float': '45e20158771fe22a',
                                 'v_float': '162121ec96ef3b94',
                                 'k_pool': '8663f37f49d8dd93',
                                 'v_pool': 'e922ade65c6f310c',
                                 'k_scale_pool': '7ff0b08f54da1202',
                                 'v_scale_pool': '3d9af12276f68832',
                                 'page_table': '73840c009124e238',
                                 'p_scale': '32.0'},
          'normal-paged': {'q': 'bcbf303d56727b49',
                           'k_i8': 'efe84223001aa95d',
                           'v_i8': 'adf83bdafc3bf155',
                           'k_scale': 'ca8cbabfdbdf820d',
                           'v_scale': '10b1bca6d34fe5da',
                           'k_float': '992e9c5ae8afa085',
                           'v_float': '408294bc7585ebd3',
                           'k_pool': 'caaa6146a1a552db',
                           'v_pool': '82d67966a4c8dcb5',
                           'k_scale_pool': 'e7c52f3b30e07b19',
                           'v_scale_pool': '59db6c5bc4032651',
                           'page_table': 'e9512b3bc2439073',
                           'p_scale': '16.0'},
          'npz-paged': {'q': 'bfba74108e74bfd9',
                        'k_i8': 'aceec6f60b529e8b',
                        'v_i8': '09cc5110282898a9',
                        'k_scale': 'a25953ce8a674094',
                        'v_scale': '97ba8948eae68d00',
                        'k_float': '0075b16405ad2c2f',
                        'v_float': '02afd0a8d2d41891',
                        'k_pool': '1aaed10b7a7c2d33',
                        'v_pool': 'dcf0079f6f194652',
                        'k_scale_pool': '295d1c751c91074a',
                        'v_scale_pool': '359caa3e76f0fc18',
                        'page_table': 'ba0826d02c4ae7d2',
                        'p_scale': '16.0'},
          'realistic-contiguous': {'q': '7ae2aad20d49eb87',
                                   'k_i8': '139a936d0842f260',
                                   'v_i8': 'f4fabbc40148f227',
                                   'k_scale': '429af741a26ba39e',
                                   'v_scale': '1296ed0e75eb69fd',
                                   'k_float': '42401066c747fe26',
                                   'v_float': '60f5531ab0fabed2',
                                   'p_scale': '4.0'},
          'realistic-d128-group3': {'q': 'a77cc5ce357aeb7b',
                                    'k_i8': '6f66723acc2452d3',
                                    'v_i8': 'a52987b89f645c04',
                                    'k_scale': '0b854226572ad323',
                                    'v_scale': 'a47fab245d1c6d7d',
                                    'k_float': 'b50eb1d572178cd8',
                                    'v_float': '80aaa1560c05bc85',
                                    'k_pool': 'a26e615d62842e5f',
                                    'v_pool': 'f83c6e2e25724550',
                                    'k_scale_pool': '896c6fccd757fb90',
                                    'v_scale_pool': '4c69eacffe912ce2',
                                    'page_table': 'd80a4c8f77a6bb0d',
                                    'p_scale': '4.0'},
          'realistic-paged': {'q': '7ae2aad20d49eb87',
                              'k_i8': '139a936d0842f260',
                              'v_i8': 'f4fabbc40148f227',
                              'k_scale': '429af741a26ba39e',
                              'v_scale': '1296ed0e75eb69fd',
                              'k_float': '42401066c747fe26',
                              'v_float': '60f5531ab0fabed2',
                              'k_pool': 'd4890d7899c546b9',
                              'v_pool': '8faaa76184e1cce0',
                              'k_scale_pool': 'cf9d43e55d95b34a',
                              'v_scale_pool': '7f9825a00995fdc4',
                              'page_table': '1fa723193c6fddc7',
                              'p_scale': '4.0'}}


@pytest.mark.parametrize("name", sorted(CASES))
def test_seeded_inputs_are_pinned(name, tmp_path):
    args = dict(heads_q=4, heads_kv=2, head_dim=64, page=16, seed=0)
    args.update(CASES[name])
    shape = parse_shape(args.pop("shape"))
    if args["data"] == "npz":
        args["data_file"] = _capture(tmp_path / "cap.npz")
    got = digests(make_inputs(Problem(shape, **args)))
    assert got == PINNED[name]
