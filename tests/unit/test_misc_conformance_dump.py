# Dumps single-node onnx backend test cases whose name matches a regex into the text format read by
# tests/unit/test_misc_conformance.cpp. Usage: python test_misc_conformance_dump.py REGEX OUTDIR
# then KILN_NODE_DUMP=OUTDIR ./build/kiln_tests --gtest_filter=MiscConformance*
import onnx, glob, os, sys, re
from onnx import numpy_helper as nh, helper
import numpy as np
root = os.path.join(os.path.dirname(onnx.__file__), 'backend', 'test', 'data', 'node')
outdir = sys.argv[2]
os.makedirs(outdir, exist_ok=True)
pat = re.compile(sys.argv[1])
def hexs(b): return b.hex() if len(b) else '-'
def tens(kind, a):
    if a is None: return f'{kind} none'
    a = np.asarray(a)
    dt = helper.np_dtype_to_tensor_dtype(a.dtype) if a.dtype != object else 8
    dims = ' '.join(str(d) for d in a.shape)
    if dt == 8:
        data = ' '.join(hexs(s.encode() if isinstance(s, str) else s) for s in a.ravel())
    else:
        data = hexs(np.ascontiguousarray(a).tobytes())
    return f'{kind} {dt} {a.ndim} {dims} {data}'.replace('  ', ' ')
n = 0
for d in sorted(os.listdir(root)):
    if not pat.search(d) or d.endswith('_expanded'): continue
    m = onnx.load(f'{root}/{d}/model.onnx')
    if len(m.graph.node) != 1: continue
    node = m.graph.node[0]
    opset = [o.version for o in m.opset_import if o.domain in ('', 'ai.onnx')][0]
    lines = [f'op {node.op_type}', f'opset {opset}']
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if a.type == a.INT: lines.append(f'attr {a.name} i {v}')
        elif a.type == a.FLOAT: lines.append(f'attr {a.name} f {v!r}')
        elif a.type == a.STRING: lines.append(f'attr {a.name} s {hexs(v)}')
        elif a.type == a.INTS: lines.append(f'attr {a.name} ints {len(v)} ' + ' '.join(map(str, v)))
        elif a.type == a.FLOATS: lines.append(f'attr {a.name} floats {len(v)} ' + ' '.join(repr(x) for x in v))
        elif a.type == a.STRINGS: lines.append(f'attr {a.name} strings {len(v)} ' + ' '.join(hexs(x) for x in v))
        else: lines = None; break
    if lines is None: continue
    ds = f'{root}/{d}/test_data_set_0'
    names = [i.name for i in m.graph.input]
    ins = {}
    for i, f in enumerate(sorted(glob.glob(ds + '/input_*.pb'))):
        t = onnx.TensorProto(); t.ParseFromString(open(f, 'rb').read())
        ins[names[i]] = nh.to_array(t)
    for name in node.input:
        lines.append(tens('in', ins.get(name) if name else None))
    outs = []
    for f in sorted(glob.glob(ds + '/output_*.pb')):
        t = onnx.TensorProto(); t.ParseFromString(open(f, 'rb').read())
        outs.append(nh.to_array(t))
    lines.append(f'nout {len(node.output)}')
    for o in outs: lines.append(tens('out', o))
    open(f'{outdir}/{d}.txt', 'w').write('\n'.join(lines) + '\n')
    n += 1
print(n, 'cases')
