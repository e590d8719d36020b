/* SPDX-License-Identifier: MIT */
/*
 * Unwind rules shared by every aiprof on a node. Each module's CFI, once decoded by one
 * injector, serves the others: one file per module in a cache directory, named by the
 * SHA-256 of the module's CFI sections (their names, addresses and bytes, and the ELF header
 * fields the rows depend on: class, byte order, OS ABI, type, machine, flags; so the same
 * libtorch in two container images is one file, and a module that only claims another's
 * build-id, or patches its header, gets a file of its own), mapped shared by every injector that unwinds it, filled
 * as they decode. A rule is the CFI row of one address in compact form: the CFA as a
 * register plus an offset, and for each register undefined, same value, saved at CFA + n, or
 * CFA + n; rows needing a DWARF expression are not shared (the PLT's, rare elsewhere).
 *
 * The file is an open-addressed table of fixed size (UWS_SLOTS slots of 64 bytes: 1 MiB,
 * every block allocated when the file is made or first mapped, so that a store into the
 * shared map never meets a full disk: that would be a SIGBUS; a disk without room leaves
 * the module unshared, counted in files_failed). A slot is claimed by a compare-and-swap of
 * its key and never rewritten; its check (a hash of the file's random salt, the key and the
 * rule) is stored last. A reader takes a rule only when the check matches and its fields are
 * in range, so a slot being written, a torn write or a damaged file reads as a miss, and
 * the address is decoded locally as without sharing. A full table stops taking rules.
 *
 * Trust: only aiprof writes there, as root. The directory must be owned by this user and
 * writable by nobody else (it is created 0700), each file too (created 0600, opened
 * without following links), else sharing is off for the run and the summary says why.
 *
 * Next to the rules, the module's CFI sections themselves ("<digest>.cfi": .eh_frame_hdr and
 * .eh_frame with their addresses, in an ELF file of their own), mapped read-only: libdw
 * reads the rows this process must decode from there, so those bytes are the page cache's,
 * one copy for the node instead of one read into every injector's memory, and no target can
 * change or truncate them under a reader.
 *
 * Garbage collection, at every open of the directory: files not opened for UWS_MAX_AGE_S
 * (7 days) are removed, unfinished files after an hour, and beyond UWS_MAX_FILES (256)
 * or UWS_MAX_BYTES (1 GiB of disk) the least recently opened go first. An image is at most
 * 64 MiB, and one process writes at most UWS_WRITE_MAX of them. Opening a file marks it used. A file removed while
 * mapped stays readable to whoever mapped it.
 */
#ifndef AIPROF_UWSHARE_H
#define AIPROF_UWSHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UWS_NREGS 17              /* x86_64 DWARF registers 0..16 (16: the return address) */
#define UWS_RSP 7                 /* the CFA is the caller's stack pointer: no rule of its own */
#define UWS_NRULES (UWS_NREGS - 1)
#define UWS_SLOTS 16384u          /* rows per module: 1 MiB (a profile needs hundreds) */
#define UWS_MAX_FILES 256
#define UWS_MAX_BYTES (1ull << 30)   /* disk the directory may use, garbage collection's bound */
#define UWS_WRITE_MAX (256ull << 20) /* images one process may write (its targets' modules
				      * decide their size: a hostile one could fill a disk) */
#define UWS_MAX_AGE_S (7 * 86400)
#define UWS_DIGEST_LEN 32

enum uws_kind {
	UWS_UNDEF = 0,            /* undefined: for the return address, the outermost frame */
	UWS_SAME = 1,             /* the callee's value */
	UWS_AT = 2,               /* saved in memory at CFA + off */
	UWS_VAL = 3,              /* the value CFA + off */
};

#define UWS_NO_CFI 1u             /* no CFI covers the address (the rule has nothing else) */
#define UWS_SIGNAL 2u             /* a signal frame: the caller's pc is exact */

struct uws_rule {
	int32_t cfa_off;
	uint8_t cfa_reg;          /* CFA = that register's value + cfa_off */
	uint8_t flags;            /* UWS_NO_CFI, UWS_SIGNAL */
	uint16_t zero;            /* 0 */
	uint32_t kinds;           /* enum uws_kind of rule i in bits 2i..2i+1 (uws_index()) */
	int16_t off[UWS_NRULES];
	uint32_t zero2;           /* 0: no padding, every byte is in the check */
};

/* The rule index of a register other than the stack pointer. */
static inline unsigned uws_index(unsigned reg)
{
	return reg < UWS_RSP ? reg : reg - 1;
}

static inline enum uws_kind uws_kind_of(const struct uws_rule *r, unsigned reg)
{
	return (enum uws_kind)((r->kinds >> (2 * uws_index(reg))) & 3u);
}

struct uws_stats {
	uint64_t files;           /* module files mapped */
	uint64_t mapped_bytes;    /* their size (pages are used as slots fill) */
	uint64_t images;          /* CFI section images mapped */
	uint64_t image_bytes;     /* their size (libdw touches the pages it reads) */
	uint64_t images_built;    /* of them, written by this process */
	uint64_t hits, misses;
	uint64_t inserts;         /* rules this process added */
	uint64_t rejected;        /* slots whose check or fields did not hold: read as a miss */
	uint64_t full;            /* rules not added: no free slot near their place */
	uint64_t files_failed;    /* modules whose rules file could not be had (not shared) */
	uint64_t images_failed;   /* images that could not be written (the module's own file
				   * is read instead) */
	int last_errno;           /* why, the last time a file could not be had (ENOSPC: the
				   * disk is full); 0: none */
};

struct uws_dir;
struct uws_file;

/*
 * Opens (creating it 0700 if needed) the cache directory and collects its garbage.
 * 0, or -errno with why set (a directory someone else could write: -EPERM).
 */
int uws_dir__open(const char *path, struct uws_dir **ret, char *why, size_t whylen);
void uws_dir__free(struct uws_dir *d);    /* NULL-safe; unmaps its files */
const char *uws_dir__path(const struct uws_dir *d);
void uws_dir__stats(const struct uws_dir *d, struct uws_stats *ret);

/* The file of the module with CFI digest `digest`, created if missing; NULL when it cannot
 * be used (counted nowhere: that module is simply not shared). Owned by d. */
struct uws_file *uws_dir__file(struct uws_dir *d, const uint8_t digest[UWS_DIGEST_LEN]);

/* The rule of module-relative address vaddr: true and *ret when a valid one is there. */
bool uws_file__get(struct uws_dir *d, struct uws_file *f, uint64_t vaddr, struct uws_rule *ret);
/* Adds the rule of vaddr unless the address is there already or there is no room: true
 * when a valid rule for it is there now. */
bool uws_file__put(struct uws_dir *d, struct uws_file *f, uint64_t vaddr,
		   const struct uws_rule *rule);

/* A section of the module to copy into its image. */
struct uws_section {
	const char *name;
	uint32_t type;
	uint64_t flags, addr, offset, size, align;
};

/*
 * The image of the module with CFI digest `digest` (uwshare.h): mapped, built from the
 * module's file fd and its sections secs[0..n) if missing. NULL when it cannot be had (the
 * caller reads the module's own file). *ret_len: the image's size. Owned by d.
 */
const void *uws_dir__image(struct uws_dir *d, const uint8_t digest[UWS_DIGEST_LEN], int fd,
			   const struct uws_section *secs, size_t n, size_t *ret_len);

/* Whether r's fields are in range (what a reader checks besides the hash). */
bool uws_rule_valid(const struct uws_rule *r);

#endif
