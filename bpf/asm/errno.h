/* asm/errno.h — for <linux/errno.h>, which libbpf's usdt.bpf.h includes: the errno values
 * are the generic ones on every architecture stacks-record builds for, and this saves the
 * build from needing the multiarch include directory (/usr/include/<triple>/asm). */
#include <asm-generic/errno.h>
