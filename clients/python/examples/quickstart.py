"""Quickstart: run a function and a logging guest in the sandboxd sidecar.

    make build                       # in the repository root: builds bin/sandboxd
    pip install ./clients/python     # or PYTHONPATH=clients/python/src
    python3 clients/python/examples/quickstart.py

The sidecar is $SANDBOXD_BIN, else `sandboxd` on PATH, else bin/sandboxd of
the checkout the package or the current directory is in.
"""

import sandboxd

ADD = """
(module
  (func (export "add") (param i32 i32) (result i32)
    local.get 0
    local.get 1
    i32.add))
"""

LOGGER = """
(module
  (import "host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "hello from the guest")
  (func (export "run")
    (call $log (i32.const 0) (i32.const 20))))
"""

SPIN = '(module (func (export "run") (loop $l (br $l))))'


def main() -> None:
    with sandboxd.Sidecar() as sb:
        r = sb.run(wat=ADD, function="add", args=[2, 40])
        print("add(2, 40) =", r.values[0], "| fuel", r.fuel_consumed, "| %.0f us" % (r.elapsed * 1e6))

        r = sb.run(wat=LOGGER, log=True, on_log=lambda line: print("guest says:", line))
        print("logger returned", r.values, "with", len(r.logs), "log line(s)")

        try:
            sb.run(wat=SPIN, fuel=1_000_000)
        except sandboxd.FuelExhausted as e:
            print("endless loop stopped:", e, "| fuel used", e.fuel_consumed)


if __name__ == "__main__":
    main()
