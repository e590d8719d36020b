/* SPDX-License-Identifier: MIT */
/*
 * ELF files through libelf: what kind of file it is (class, machine, static or dynamic),
 * its build-id and PT_LOAD segments, name -> symbol and address -> symbol.
 *
 * Everything read from the file is bounds-checked: a hostile file makes these functions
 * fail, never crash (tests/fuzz/fuzz_elfsym.c). ELF32 and big-endian files open too, so
 * that callers can look at elf_file__info() and refuse them with a clear message.
 *
 * An elf_file is not thread-safe: elf_file__symbolize() builds its address index on first
 * use. Callers that share one between threads serialize the calls.
 */
#ifndef AIPROF_ELFSYM_H
#define AIPROF_ELFSYM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct elf_file;
struct maps_entry;
struct Elf;

struct elf_segment {         /* one PT_LOAD */
	uint64_t vaddr, memsz;
	uint64_t offset, filesz;
	uint64_t align;
	unsigned prot;           /* PROT_READ | PROT_WRITE | PROT_EXEC, from p_flags */
};

#define ELF_BUILD_ID_MAX 64  /* bytes; SHA-1 ids are 20 */

struct elf_info {
	unsigned elf_class;      /* ELFCLASS32 or ELFCLASS64 */
	unsigned machine;        /* e_machine: EM_X86_64, EM_386, EM_AARCH64, ... */
	unsigned type;           /* e_type: ET_EXEC, ET_DYN, ... */
	bool has_interp;         /* PT_INTERP: started through a dynamic loader */
	bool has_dynamic;        /* PT_DYNAMIC (a static-pie has this but no PT_INTERP) */
	bool has_dynsym, has_symtab;
	const char *interp;      /* PT_INTERP's path, NULL if none or unreadable */
	char build_id[2 * ELF_BUILD_ID_MAX + 1];  /* lower-case hex of NT_GNU_BUILD_ID; "" if none */
	const struct elf_segment *loads;          /* PT_LOADs in file order */
	size_t n_loads;
};

/*
 * Opening. Each returns 0 and *ret (caller frees with elf_file__free()), or a negative
 * errno: the stat(2)/open(2) error for a path, -ENOEXEC if it is not a regular file (a
 * device or FIFO is never opened or read) or the bytes are not an ELF file libelf can read,
 * -ENOMEM.
 */
int elf_file__open(const char *path, struct elf_file **ret);
/* Works on a dup of fd (O_CLOEXEC); the caller keeps and closes its own fd. */
int elf_file__open_fd(int fd, struct elf_file **ret);
/* Works on a private copy of the len bytes at buf. */
int elf_file__open_mem(const void *buf, size_t len, struct elf_file **ret);
void elf_file__free(struct elf_file *f);  /* NULL-safe */

/* Points into f; valid until elf_file__free(). */
const struct elf_info *elf_file__info(const struct elf_file *f);

/* libelf's handle of f (for libdw); valid until elf_file__free(). */
struct Elf *elf_file__libelf(const struct elf_file *f);
/* The descriptor f reads from (for pread of a section's bytes); valid as long. */
int elf_file__fd(const struct elf_file *f);

/* ELFCLASS64 and EM_X86_64: the only kind the injector supports. */
bool elf_info__is_x86_64(const struct elf_info *info);

#define ELF_SYM_IFUNC 1      /* positive return: the address is an IFUNC resolver */

/*
 * Finds a defined FUNC, OBJECT or IFUNC symbol by name, in .dynsym first, then .symtab.
 * name is "sym", or "sym@VERSION" for one version (either default or hidden). For a bare
 * name, the default version (sym@@VER: .gnu.version's hidden bit clear, or unversioned)
 * wins over hidden ones (sym@VER), and global/weak over local.
 * Returns 0, or ELF_SYM_IFUNC (> 0) when the symbol is a GNU indirect function: the address
 * is then that of its resolver, not of the function to call. -ENOENT if not found.
 * *ret_vaddr is st_value (add the load bias for a runtime address); either out-pointer
 * may be NULL.
 */
int elf_file__find_symbol(const struct elf_file *f, const char *name, uint64_t *ret_vaddr,
			  uint64_t *ret_size);

/*
 * Address -> symbol, vaddr in the file's own terms (runtime address minus load bias).
 * A sized function containing vaddr wins; otherwise the nearest preceding symbol if it has
 * no size (assembler labels: taken to run up to the next symbol). A sized symbol that ends
 * before vaddr is not a match: the code there is something that has no symbol, and
 * -ENOENT says so (callers then print "module+0xoff").
 * *ret_name is the raw name (mangled; may carry "@VER" from .symtab), valid until
 * elf_file__free(). Builds a sorted index on first call (hence not thread-safe).
 */
int elf_file__symbolize(const struct elf_file *f, uint64_t vaddr, const char **ret_name,
			uint64_t *ret_offset);

/*
 * Load bias from one mapping of the file: runtime address = bias + vaddr. The mapping's
 * file offset picks the PT_LOAD; when more than one PT_LOAD covers that file page (old
 * layouts share a page between text and data) the one whose PF_X matches the mapping's
 * PROT_EXEC wins. -ENOENT for a PROT_NONE mapping (a gap between segments) or one whose
 * offset no PT_LOAD covers.
 */
int elf_file__load_bias(const struct elf_file *f, const struct maps_entry *e,
			uint64_t *ret_bias);

/*
 * Demangles a C++ name ("_ZN3foo3barEv" -> "foo::bar()") with the C++ runtime's
 * __cxa_demangle. A "@VER" or "@@VER" suffix is kept after the demangled part. Returns a
 * malloc'd string, or NULL if name is not a mangled C++ name (or demangling failed): the
 * caller then prints the raw name. nvcc's "__nv_static_<N>__<unit>_" prefix of kernels with
 * internal linkage is dropped.
 */
char *symbol_demangle(const char *name);

/*
 * nvcc's host stub for a kernel K is "__device_stub__" followed by K's mangled name without
 * its leading "_" (demangled: "__device_stub__Z16scale_add_kernelPfPKffi(float*, ...)"). For
 * such a stub name, mangled or demangled, returns K demangled as CUPTI names the kernel
 * ("scale_add_kernel(float*, float const*, float, int)"), malloc'd; NULL for any other name.
 */
char *device_stub_kernel(const char *name);

#endif
