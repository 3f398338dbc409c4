#!/usr/bin/env bash
# test_module_hygiene.sh — what the libraries expose and depend on (issue 20 item 5):
# libdeepinfer.so exports exactly the functions include/deepinfer.h declares (all di_, no
# internal name, no data), the internal .so of the A/B tools still exports the internals, the
# engine sources include nothing of the cluster planners, the golden harness, expert parallelism or
# the gateway (data flows one way; MPI stays out of the engine library, libcurl is the gateway's
# alone), the model reaches the kernels only through its backend table, PCRE2 is a dependency of
# the pre-tokenizer benchmark alone, and no library or CLI source but src/base/env.c reads the
# environment (issue 20: every knob is parsed once and passed in).
set -u
cd "$(dirname "$0")/../.."
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

exports=$(nm -D --defined-only build/libdeepinfer.so | awk '{print $NF}' | sort)
declared=$(CC=${CC:-cc} tools/export-map.sh include/deepinfer.h | sed -n 's/^    \(di_[A-Za-z0-9_]*\);$/\1/p' | sort)
[ "$(echo "$declared" | wc -l)" -ge 50 ] && ok || bad "export-map.sh found only $(echo "$declared" | wc -l) functions in deepinfer.h"
others=$(echo "$exports" | grep -v '^di_')
[ -z "$others" ] && ok || bad "libdeepinfer.so exports non-di_ symbols: $(echo $others | head -c 400)"
extra=$(comm -23 <(echo "$exports") <(echo "$declared"))
[ -z "$extra" ] && ok || bad "libdeepinfer.so exports symbols deepinfer.h does not declare: $(echo $extra | head -c 400)"
missing=$(comm -13 <(echo "$exports") <(echo "$declared"))
[ -z "$missing" ] && ok || bad "deepinfer.h declares functions libdeepinfer.so lacks: $(echo $missing)"
data=$(nm -D --defined-only build/libdeepinfer.so | awk '$2 !~ /^[TtWwi]$/ {print $NF}')
[ -z "$data" ] && ok || bad "libdeepinfer.so exports data: $(echo $data)"

for s in model_load model_forward state_create di_simd_gemv_rows di_pool_create; do
    nm -D --defined-only build/libdeepinfer_internal.so | grep -q " $s\$" && ok || bad "libdeepinfer_internal.so lacks $s"
done

# One-way data flow: the engine library does not include the planners' or the harness's headers.
# The gateway (src/gateway) sits above both: it routes with the planners, the engine never calls it.
up=$(grep -rlE '#include "(cluster/|golden/|ep/|gateway/|deepinfer_cluster\.h|deepinfer_ep\.h|mpi\.h)' src --include='*.[ch]' |
    grep -vE '^src/(cluster|golden|ep|gateway)/')
[ -z "$up" ] && ok || bad "engine sources include cluster/golden/ep/gateway headers: $up"
# Expert parallelism (src/ep) is the one part that links MPI: never the engine library.
ldd build/libdeepinfer.so | grep -q libmpi && bad "libdeepinfer.so links MPI" || ok
nm build/libdeepinfer.a 2>/dev/null | grep -qE ' U (MPI|PMPI)_' && bad "libdeepinfer.a calls MPI" || ok
for a in build/libdeepinfer.a; do
    nm "$a" 2>/dev/null | grep -qE ' [Tt] (di_eplb_rebalance|di_sim_run|golden_open|di_gateway_start)$' && bad "$a holds planner, harness or gateway code" || ok
done
nm build/libdeepinfer_gateway.a | grep -q ' T di_gateway_start$' && ok || bad "libdeepinfer_gateway.a lacks di_gateway_start"
nm -D build/libdeepinfer.so | grep -q ' U curl_' && bad "libdeepinfer.so links libcurl" || ok
nm build/libdeepinfer_cluster.a | grep -q ' T di_eplb_rebalance$' && ok || bad "libdeepinfer_cluster.a lacks di_eplb_rebalance"
nm build/libdeepinfer_golden.a | grep -q ' T golden_open$' && ok || bad "libdeepinfer_golden.a lacks golden_open"

# The environment is read in one place: src/base/env.c's accessors, for the library and for the
# CLI that links it (tools/deepinfer).  The A/B tools (tools/*_ab.c) dlopen two builds instead of
# linking one, so they read their own KERNEL_AB_* / DECODE_AB_* knobs, once at start.
readers=$(grep -rn 'getenv' src tools/deepinfer --include='*.[ch]' | grep -v '^src/base/env\.c:')
[ -z "$readers" ] && ok || bad "getenv outside src/base/env.c: $readers"

# The forward pass reaches the kernels only through the backend table the model chose at load
# (kernels/backend.h): no direct kernel call, no per-call kernel choice in src/model.
direct=$(grep -nE 'di_matmul(_ref|_ref_qa|_qa|_into|_simd)?\(|di_roundtrip_[a-z0-9_]+\(|di_expf_row\(|di_vec_|di_simd_' \
    src/model/*.c)
[ -z "$direct" ] && ok || bad "src/model calls kernels around the backend table: $direct"

# The kernels read no knob: the table carries what the knobs chose at load (backend_cpu.c's
# di_backend_cpu_from_env is the one reader, for the loaders).
knobs=$(grep -rnE 'di_env_[a-z_]+\(' src/kernels --include='*.[ch]' | grep -v '^src/kernels/cpu/backend_cpu\.c:')
[ -z "$knobs" ] && ok || bad "kernels read knobs per call: $knobs"

# PCRE2 only where it is the baseline: no other link command names it (the linker's --as-needed
# would drop an unused -lpcre2-8 from the binaries anyway, so the commands are what to check).
cmds=$(make -s -n -B build/libdeepinfer.so build/deepinfer build/tests/test_tokenizer build/bench/bench_decode 2>&1)
echo "$cmds" | grep -q -- '-o build/deepinfer ' && ok || bad "make -n printed no link command of build/deepinfer"
echo "$cmds" | grep -q 'pcre2' && bad "link commands other than the pre-tokenizer benchmark's name PCRE2" || ok
make -s -n -B build/bench/bench_tokenizer_pretok 2>&1 | grep -q -- '-o build/bench/bench_tokenizer_pretok .*-lpcre2-8' \
    && ok || bad "bench_tokenizer_pretok is not linked with PCRE2"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
