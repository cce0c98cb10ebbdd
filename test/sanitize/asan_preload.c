/*
 * test/sanitize/asan_preload.c
 *		Preloaded beside AddressSanitizer's runtime into Debian's server for
 *		`make test SANITIZE=1`.
 *
 * The server links libgpg-error, whose constructor calls bindtextdomain()
 * before the runtime has initialised.  bindtextdomain() holds glibc's
 * gettext lock when it first calls malloc(); that malloc() initialises the
 * runtime, which looks up swift_demangle with dlsym() and clears the failure
 * with dlerror(); dlerror() translates its message through gettext and waits
 * for the lock its own thread holds: the server hangs before main().
 *
 * Defining swift_demangle makes that dlsym() succeed, so dlerror() has no
 * message to translate.  It demangles nothing (NULL: "not a Swift name"), so
 * reports print C names as they are.
 */
#include <stddef.h>
#include <stdint.h>

char	   *swift_demangle(const char *mangled, size_t length, char *output,
						   size_t *output_length, uint32_t flags);

/*
 * swift_demangle
 *		The demangler hook AddressSanitizer looks up; no name is a Swift name.
 */
char *
swift_demangle(const char *mangled, size_t length, char *output,
			   size_t *output_length, uint32_t flags)
{
	return NULL;
}
