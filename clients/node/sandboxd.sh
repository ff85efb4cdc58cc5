#!/bin/sh
# `npx sandboxd ARGS...`: the sandboxd binary this package carries (bin/, in
# a package made by npm pack), or, for a package linked from a checkout
# (npm install <checkout>/clients/node), the checkout's bin/sandboxd. exec:
# the binary's exit status, signals and terminal are the command's own.
here=$(dirname "$(readlink -f "$0" 2>/dev/null || echo "$0")")
for binary in "$here/bin/sandboxd" "$here/../../bin/sandboxd"; do
    if [ -x "$binary" ]; then
        exec "$binary" "$@"
    fi
done
echo "sandboxd: this package carries no binary and is not in a sandboxd checkout with bin/sandboxd" \
    "(looked at $here/bin/sandboxd and $here/../../bin/sandboxd): run make build in the checkout" >&2
exit 127
