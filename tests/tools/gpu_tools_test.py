#!/usr/bin/env python3
"""The GPU tools' parsers (tools/gpu/*.py) on small made-up inputs: they run only on the GPU
machine, where a wrong figure would be read as a measurement."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "gpu"))
import nsys_step  # noqa: E402
import ptx_divisions  # noqa: E402

HEADER = '"Start (ns)","Duration (ns)","GrdX","GrdY","GrdZ","Name"\n'


def trace(kernels):
    """An nsys cuda_gpu_trace CSV of (start ns, duration ns, name, grid x) rows, after the
    lines nsys prints before its table."""
    lines = ["Processing [x.sqlite] with [cuda_gpu_trace]...\n", "\n", HEADER]
    lines += [f'"{s}","{d}","{gx}","1","1","{name}"\n' for s, d, name, gx in kernels]
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    f.writelines(lines)
    f.close()
    return f.name


class NsysStep(unittest.TestCase):
    def setUp(self):
        # A warm-up step, then the step: embedding, a product overlapping the norm before it
        # ends, a combine after a 500 ns gap.
        self.base = trace([
            (0, 100, "void hibana::cuda::embedding_kernel(float*)", 1),
            (1000, 100, "void hibana::cuda::embedding_kernel(float*)", 1),
            (1100, 2000, "void hibana::cuda::rmsnorm_kernel(float*)", 1),
            (2100, 4000, "void hibana::cuda::mm::gemv_kernel<(Elt)3, false>(Params, int)", 64),
            (6600, 1000, "void hibana::cuda::moe_combine_kernel(Pairs)", 8),
        ])
        # The same step where the product took 1000 ns longer.
        self.slower = trace([
            (1000, 100, "void hibana::cuda::embedding_kernel(float*)", 1),
            (1100, 2000, "void hibana::cuda::rmsnorm_kernel(float*)", 1),
            (2100, 5000, "void hibana::cuda::mm::gemv_kernel<(Elt)3, false>(Params, int)", 64),
            (7600, 1000, "void hibana::cuda::moe_combine_kernel(Pairs)", 8),
        ])

    def tearDown(self):
        os.unlink(self.base)
        os.unlink(self.slower)

    def test_critical_times_and_gaps_add_up_to_the_span_from_the_last_embedding(self):
        span, n, busy, groups, _ = nsys_step.step_groups(self.base)
        self.assertEqual((span, n, busy), (6600, 4, 7100))
        crit = {k[0]: g[2] for k, g in groups.items()}
        # The product ran from 2100 to 6100 with the norm ending at 3100: it added 3000.
        self.assertEqual(crit["gemv_kernel<3, false>"], 3000)
        self.assertEqual(crit["rmsnorm_kernel"], 2000)
        gaps = {k[0]: g[3] for k, g in groups.items()}
        self.assertEqual(gaps["moe_combine_kernel"], 500)
        self.assertEqual(sum(crit.values()) + sum(gaps.values()), span)

    def test_the_idle_time_between_steps_is_from_a_steps_last_kernel_to_the_next_embedding(self):
        # The warm-up step's embedding ends at 100, the step starts at 1000: one period of
        # 1000 ns, 900 of them idle; a lone step has no period.
        self.assertEqual(nsys_step.between_steps(self.base), (1, 1000, 900))
        self.assertIsNone(nsys_step.between_steps(self.slower))

    def test_the_comparison_puts_the_kernel_that_changed_first(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            nsys_step.compare(nsys_step.step_groups(self.slower),
                              nsys_step.step_groups(self.base))
        lines = out.getvalue().splitlines()
        self.assertIn("change +1.0 us", lines[0])
        self.assertIn("gemv_kernel<3, false> (64,1,1)", lines[2])
        self.assertIn("+1.0", lines[2])
        self.assertIn("+0.0", lines[3])


# A made-up PTX of two kernels: the first divides once before its wait, once after it in a
# loop's body and once after the loop; the second has no wait and one remainder.
PTX = """
.visible .entry _Z1aPl(
{
	div.s64 	%rd1, %rd2, %rd3;
	griddepcontrol.wait;
$L__BB0_1:
	rem.u64 	%rd4, %rd5, %rd6;
	add.s64 	%rd7, %rd7, 1;
	@%p1 bra.uni 	$L__BB0_1;
	div.u64 	%rd8, %rd9, %rd6;
	div.s32 	%r1, %r2, %r3;
	ret;
}
.entry _Z1bPl(
{
	rem.s64 	%rd1, %rd2, %rd3;
	ret;
}
"""


class PtxDivisions(unittest.TestCase):
    def test_sites_before_and_after_the_wait_and_in_loops(self):
        found = {name: ptx_divisions.count(body) for name, body in ptx_divisions.kernels(PTX)}
        self.assertEqual(found, {"_Z1aPl": (1, 2, 1), "_Z1bPl": (1, 0, 0)})


if __name__ == "__main__":
    unittest.main()
