package sandbox

// What a module may import, checked before any store exists: deny by
// default, and a granted name with another signature is refused too.
// Four kinds of import can be granted, each by its own capability:
//
//   - extism:host/env (a plugin's kernel and sandboxd's host functions),
//     known functions with their exact signatures;
//   - wasi_snapshot_preview1, with the wasi capability;
//   - the parent's own functions, declared in hostFunctions (extism:host/
//     user among them, Extism's namespace for a host's functions);
//   - sandboxd's host ABI (host::log, random, now_ns), each with its
//     capability.

import (
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/protocol"
)

// HostFunction declares an import the caller serves (protocol.HostFunction).
type HostFunction = protocol.HostFunction

// checkImports refuses the first import of m that caps and the caller's
// declarations (declared) do not grant. plugin says m is an Extism plugin
// (isPlugin). The kinds are checked in that order (a module's Extism
// imports first, then WASI, whose refusal names every WASI function it
// imports), so a module's first problem is reported whatever order it
// imports in.
func checkImports(m *Module, caps Capabilities, declared []HostFunction, plugin bool) *Error {
	deny := func(imp Import, why string) *Error {
		return &Error{Kind: KindDisallowedImport, Module: imp.Module, Name: imp.Name,
			Message: fmt.Sprintf("import %s::%s is not allowed: %s", boundedName(imp.Module), boundedName(imp.Name), why)}
	}
	decl := declarations(declared)
	if plugin {
		for _, imp := range m.Imports {
			if imp.Module == ExtismEnvModule {
				if err := checkExtismImport(imp, deny); err != nil {
					return err
				}
			}
		}
	}
	if err := checkWASIImports(m, caps, deny); err != nil {
		return err
	}
	for _, imp := range m.Imports {
		switch {
		case imp.Module == WASIModule, plugin && imp.Module == ExtismEnvModule:
			continue // checked above
		case imp.Module == HostModule:
			if err := checkHostABIImport(imp, caps, deny); err != nil {
				return err
			}
			continue
		}
		f, ok := decl[[2]string{imp.Module, imp.Name}]
		switch {
		case !ok && imp.Module == ExtismUserModule:
			return deny(imp, "extism:host/user functions are the parent's: declare it in hostFunctions")
		case !ok:
			return deny(imp, "the host ABI has no such function (grantable: "+hostNames(nil)+"; "+grantedNames(caps)+"), and hostFunctions does not declare it")
		case imp.Kind != "func":
			return deny(imp, "it is a "+imp.Kind+"; a host function is a function")
		case imp.Type != f.Signature():
			return &Error{Kind: KindDisallowedImport, Module: imp.Module, Name: imp.Name,
				Message: fmt.Sprintf("import %s::%s has signature %s; hostFunctions declares %s", boundedName(imp.Module), boundedName(imp.Name), imp.Type, f.Signature())}
		case f.UsesBytes() && !plugin:
			return deny(imp, "its declaration uses bytes, an Extism memory handle: only a plugin (a module importing extism:host/env) can pass one")
		}
	}
	return nil
}

// declarations indexes declared by module and name.
func declarations(declared []HostFunction) map[[2]string]HostFunction {
	if len(declared) == 0 {
		return nil
	}
	m := make(map[[2]string]HostFunction, len(declared))
	for _, f := range declared {
		m[[2]string{f.Module, f.Name}] = f
	}
	return m
}

// checkExtismImport checks one import of extism:host/env: a known
// function with its exact signature, never the network. (The log
// functions link without the log capability, as Extism links them for
// every plugin: their lines are then dropped and counted.)
func checkExtismImport(imp Import, deny func(Import, string) *Error) *Error {
	f, known := extismABI[imp.Name]
	switch {
	case imp.Kind != "func":
		return deny(imp, "it is a "+imp.Kind+"; the Extism ABI has only functions")
	case !known:
		return deny(imp, "the Extism ABI as sandboxd implements it has no such function (see docs/protocol.md)")
	case f.refused != "":
		return deny(imp, f.refused)
	case imp.Type != f.signature:
		return deny(imp, fmt.Sprintf("wrong signature %s, expected %s", imp.Type, f.signature))
	}
	return nil
}

// checkWASIImports checks m's WASI imports against the grant: without it
// the refusal names every WASI function m imports.
func checkWASIImports(m *Module, caps Capabilities, deny func(Import, string) *Error) *Error {
	var names []string
	for _, imp := range m.Imports {
		if imp.Module == WASIModule {
			names = append(names, imp.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	if caps.WASI == nil {
		return wasiRefusal(names)
	}
	for _, imp := range m.Imports {
		if imp.Module != WASIModule {
			continue
		}
		want, known := wasiFuncs[imp.Name]
		switch {
		case imp.Kind != "func":
			return deny(imp, "it is a "+imp.Kind+"; WASI provides only functions")
		case !known:
			return deny(imp, "WASI preview1 has no such function here (see docs/protocol.md for the list)")
		case imp.Type != want:
			return deny(imp, fmt.Sprintf("wrong signature %s, expected %s", imp.Type, want))
		}
	}
	return nil
}

// checkHostABIImport checks one import of sandboxd's host module.
func checkHostABIImport(imp Import, caps Capabilities, deny func(Import, string) *Error) *Error {
	h, known := lookupHost(imp.Module, imp.Name)
	switch {
	case !known:
		return deny(imp, "the host ABI has no such function (grantable: "+hostNames(nil)+"; "+grantedNames(caps)+")")
	case imp.Kind != "func":
		return deny(imp, "it is a "+imp.Kind+"; the host exports only functions")
	case !h.granted(caps):
		return deny(imp, "the "+capabilityOf(h.name)+" capability was not granted for this run ("+grantedNames(caps)+")")
	case imp.Type != h.signature():
		return deny(imp, fmt.Sprintf("wrong signature %s, expected %s", imp.Type, h.signature()))
	}
	return nil
}

// wasiRefusal is the disallowed_import error of a module that imports WASI
// without the grant. It names every WASI function the module imports.
func wasiRefusal(names []string) *Error {
	return &Error{Kind: KindDisallowedImport, Module: WASIModule, Name: names[0],
		Message: fmt.Sprintf("the module imports %d WASI function(s) (%s::%s) but the wasi capability was not granted for this run",
			len(names), WASIModule, strings.Join(names, ", "))}
}
