/*
 * netif.c - bring a network interface up; see policy/netif.h. Called by policy/jail.c.
 */
#include "policy/netif.h"

#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* netif_up - SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP added */
int netif_up(const char *name)
{
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	if (strlen(name) >= sizeof(ifr.ifr_name))
		return -ENAMETOOLONG;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
		rc = -errno;
	} else if (!(ifr.ifr_flags & IFF_UP)) {
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0)
			rc = -errno;
	}
	close(fd);
	return rc;
}
