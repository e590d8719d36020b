#!/usr/bin/env bash
# Generates the ELF seeds in elfsym/ (built by tests/fuzz/run.sh, not committed). Small on
# purpose: each seed is read whole on every fuzz iteration.
#   libv.so           versioned symbols (foo@V1, foo@@V2), an IFUNC, a C++ name, .symtab
#   libv-stripped.so  the same with .dynsym only
#   static-exe        -nostdlib static executable, no PT_INTERP, local + global symbols
#   mini64            hand-made: ELF header, PT_LOAD, PT_NOTE build-id, no sections
#   mini32            hand-made ELF32 i386 header only
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=elfsym
mkdir -p "$out"
small=(-O1 -nostdlib -Wl,--build-id -Wl,-z,noseparate-code -Wl,-z,max-page-size=0x1000)

cat >"$tmp/lib.c" <<'C'
int foo_v1(int x) { return x + 1; }
int foo_v2(int x) { return x + 2; }
__asm__(".symver foo_v1, foo@V1");
__asm__(".symver foo_v2, foo@@V2");
int bar_data = 42;
static int impl(int x) { return x * 2; }
static void *resolve_baz(void) { return (void *)impl; }
int baz(int) __attribute__((ifunc("resolve_baz")));
int _ZN3foo3barEv(void) { return 7; }
C
printf 'V1 { global: foo; bar_data; local: *; };\nV2 { global: foo; baz; _ZN3foo3barEv; } V1;\n' \
	>"$tmp/ver.map"
gcc -shared -fPIC "${small[@]}" -Wl,--version-script="$tmp/ver.map" -o "$out/libv.so" "$tmp/lib.c"
gcc -shared -fPIC "${small[@]}" -Wl,--version-script="$tmp/ver.map" -s \
	-o "$out/libv-stripped.so" "$tmp/lib.c"

cat >"$tmp/exe.c" <<'C'
static int helper(int x) { return x * 3; }
int counter;
int main_like(int x) { return helper(x) + counter; }
void _start(void) { for (;;) __asm__ volatile("" ::"r"(main_like(1))); }
C
gcc -static -fno-pie -no-pie "${small[@]}" -o "$out/static-exe" "$tmp/exe.c"

python3 - "$out" <<'PY'
import struct, sys
out = sys.argv[1]
# ELF64: Ehdr(64) + 2 Phdr(56) + Nhdr(12) + "GNU\0" + 20-byte id + 12 bytes of code
size = 64 + 2 * 56 + 12 + 4 + 20 + 12
note = 64 + 2 * 56
ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
eh = ident + struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0x400000 + size - 12, 64, 0, 0, 64, 56, 2, 0, 0, 0)
load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0x400000, 0x400000, size, size, 0x1000)
pnote = struct.pack("<IIQQQQQQ", 4, 4, note, 0x400000 + note, 0x400000 + note, 36, 36, 4)
body = struct.pack("<III", 4, 20, 3) + b"GNU\0" + bytes(range(0xa0, 0xb4)) + b"\x90" * 11 + b"\xc3"
open(out + "/mini64", "wb").write(eh + load + pnote + body)
ident32 = b"\x7fELF" + bytes([1, 1, 1]) + bytes(9)
open(out + "/mini32", "wb").write(ident32 + struct.pack("<HHIIIIIHHHHHH", 2, 3, 1, 0, 0, 0, 0, 52, 32, 0, 40, 0, 0))
PY
ls -l "$out"
