# retry.sh - a container run that a transient engine error may fail (sourced, not run): Podman
# 4.3 was seen failing a plain `podman run --rm` once with "preparing container ... for attach:
# write child: broken pipe" (conmon), and the clean-clone run stopped at its smoke test.
#
# Needs log() from the sourcing script.

tries() { # tries N COMMAND...: COMMAND until it succeeds, N times at most; its last status
    local n=$1 i status=0
    shift
    for i in $(seq 1 "$n"); do
        "$@" && return 0
        status=$?
        [ "$i" -lt "$n" ] || break
        log "attempt $i of $n failed (exit $status): $1 $2 ...; again"
        sleep 1
    done
    return "$status"
}
