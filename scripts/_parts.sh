# Sourced by scripts/test: run the parts of the suite and end with one summary of them.
# `part NAME COMMAND...` runs a part (its output goes to the terminal and to a log) and records
# its result, its passed / failed / skipped counts (read from the part's own closing lines:
# pytest's "N passed, M failed, K skipped in Xs", cargo's "test result: ... N passed; M failed;
# K ignored") and its time; a part that printed "... are skipped" and succeeded is "skipped".
# `summary` prints the table and a last line "total: N passed, N failed, N skipped", and
# returns 1 if any part failed. tests/test_scripts_test_summary.py checks both.
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
status=0
rows=()
totals=(0 0 0)
part() {  # part NAME COMMAND...: run it (output to the terminal and a log), then add its row
    local name="$1" start=$SECONDS rc=0 result counts
    shift
    "$@" 2>&1 | tee "$logs/$name.log" || rc=$?
    # pytest: "N passed, M failed, K skipped ... in Xs"; cargo: "test result: ok. N passed; M failed; K ignored".
    counts="$(awk '/ in [0-9.]+s/ && /(passed|failed|error)/ { p = $0 }
                  /^test result:/ { for (i = 1; i < NF; i++) { v = $i + 0; w = $(i + 1); sub(/[;,.]$/, "", w)
                      if (w == "passed") cp += v; if (w == "failed") cf += v; if (w == "ignored") cs += v } }
                  END { if (p != "") { n = split(p, f, /[ ,=]+/)
                          for (i = 2; i <= n; i++) { v = f[i - 1] + 0
                              if (f[i] == "passed") a += v; if (f[i] == "failed" || f[i] ~ /^error/) b += v
                              if (f[i] == "skipped") c += v } }
                        printf "%d %d %d", a + cp, b + cf, c + cs }' "$logs/$name.log")"
    read -r -a counts <<< "$counts"
    if [ "$rc" != "0" ]; then result=FAILED; status=1
    elif grep -q "are skipped$" "$logs/$name.log"; then result=skipped
    else result=ok; fi
    [ "$name" = "docs" ] && [ "$rc" = "0" ] && counts=(1 0 0)
    [ "$name" = "docs" ] && [ "$rc" != "0" ] && counts=(0 1 0)
    for i in 0 1 2; do totals[i]=$((totals[i] + counts[i])); done
    rows+=("$(printf '%-14s %-8s %7d %7d %8d  %dm%02ds' "$name" "$result" "${counts[@]}" \
        $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)))")
}
summary() {
    echo
    echo "icefloe test summary"
    printf '%-14s %-8s %7s %7s %8s  %s\n' part result passed failed skipped time
    printf '%s\n' "${rows[@]}"
    echo "total: ${totals[0]} passed, ${totals[1]} failed, ${totals[2]} skipped"
    return "$status"
}
