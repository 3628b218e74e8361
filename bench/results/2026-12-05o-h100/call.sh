# The thirty-fourth session's call on HEAD (kernels unchanged since 21ed353; new: tests/gpu/test_llm.py): the same
# steps as the thirty-third session's, run by its script (GPU suite without the soak, issue 10's official T=4 kernel
# bench with both SGLang releases, a 1,500-step lockstep soak and `replayssm demo`; results under /tmp/l, in call.tgz).
#   REPLAYSSM_COMMIT=<hash> LIMIT=540 bash bench/results/2026-12-05o-h100/call.sh   (carry .peers and .whl)
exec bash bench/results/2026-12-05l-h100/call.sh
