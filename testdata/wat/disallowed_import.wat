;; disallowed_import.wat - asks for a host function outside the ABI.
;; Attacks: the host ABI (deny by default): imports env::secret.
;; Fence: the linker only defines host::log/random/now_ns, and only if granted.
;; Expected: refused at link/instantiation, before any guest code runs
;;           (kind import / link error naming "env" "secret"); fuel 0.
(module
  (import "env" "secret" (func $secret (result i32)))
  (func (export "run") (result i32)
    call $secret))
