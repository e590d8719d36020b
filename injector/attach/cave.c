/* SPDX-License-Identifier: MIT */
/* The target's module headers and libc banner, judged; see cave.h. */
#include <ctype.h>
#include <string.h>
#include <sys/mman.h>

#include "cave.h"

bool cave_ehdr_ok(const Elf64_Ehdr *eh)
{
	return memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
	       eh->e_phentsize == sizeof(Elf64_Phdr) && eh->e_phnum > 0 &&
	       eh->e_phnum <= CAVE_MAX_PHDRS && eh->e_phoff <= CAVE_PAGE;
}

uint64_t cave_find_in(const struct maps *m, size_t i, const Elf64_Ehdr *eh, const Elf64_Phdr *ph,
		      size_t need)
{
	const struct maps_entry *base = &m->v[i];
	uint64_t bias = UINT64_MAX;
	size_t nph = eh->e_phnum <= CAVE_MAX_PHDRS ? eh->e_phnum : 0;

	for (size_t k = 0; k < nph; k++)
		if (ph[k].p_type == PT_LOAD && bias == UINT64_MAX)
			bias = base->start - (ph[k].p_vaddr & ~(uint64_t)(CAVE_PAGE - 1));
	for (size_t k = 0; k < nph && bias != UINT64_MAX; k++) {
		uint64_t end, page_end, at;

		if (ph[k].p_type != PT_LOAD || !(ph[k].p_flags & PF_X) ||
		    ph[k].p_memsz > (1ULL << 40) || ph[k].p_vaddr > (1ULL << 47))
			continue;
		/* the file's word, so wrapping arithmetic: only the kernel's maps decide */
		end = bias + ph[k].p_vaddr + ph[k].p_memsz;
		at = (end + 15) & ~15ULL;
		page_end = (end + CAVE_PAGE - 1) & ~(uint64_t)(CAVE_PAGE - 1);
		if (at < end || page_end < end || at + need < at || at + need > page_end)
			continue;
		/* the kernel's word, not the file's: that room is mapped, executable */
		for (size_t j = 0; j < m->n; j++)
			if (m->v[j].start <= at && at + need <= m->v[j].end &&
			    (m->v[j].prot & PROT_EXEC) && !m->v[j].shared && m->v[j].path &&
			    base->path && strcmp(m->v[j].path, base->path) == 0)
				return at;
	}
	return 0;
}

size_t cave_glibc_version(const char *buf, size_t n, char *out, size_t len)
{
	static const char banner[] = "release version ";
	const char *hit = len ? memmem(buf, n, banner, sizeof(banner) - 1) : NULL;
	size_t k = 0, left;

	if (len)
		out[0] = 0;
	if (!hit)
		return 0;
	hit += sizeof(banner) - 1;
	left = n - (size_t)(hit - buf);
	while (k + 1 < len && k < left &&
	       (isdigit((unsigned char)hit[k]) ||
		(hit[k] == '.' && k + 1 < left && isdigit((unsigned char)hit[k + 1]))))
		k++;
	memcpy(out, hit, k);
	out[k] = 0;
	return k;
}
