# wait_for.sh — sourced by the shell tests: synchronise with a background program by polling a
# condition, bounded in time, instead of sleeping a guessed while.
# wait_for SECONDS COMMAND [ARGS...]: run COMMAND every 50 ms until it succeeds (status 0) or
# SECONDS have passed (status 1).
wait_for() {
    local limit=$1 i
    shift
    for i in $(seq $((limit * 20))); do
        "$@" && return 0
        sleep 0.05
    done
    return 1
}
