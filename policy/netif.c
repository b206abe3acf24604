/*
 * netif.c - interfaces and routes of a sandbox's network namespace; see policy/netif.h.
 * Called by policy/jail.c.
 */
#include "policy/netif.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <net/if.h>
#include <stdbool.h>
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

/* netif_host_addrs - see netif.h */
int netif_host_addrs(uint32_t *out, size_t max)
{
	struct ifaddrs *ifa;
	if (getifaddrs(&ifa) != 0)
		return -errno;
	size_t n = 0;
	for (struct ifaddrs *i = ifa; i && n < max; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		uint32_t a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
		if ((ntohl(a) >> 24) == 127)
			continue; /* the sandbox's own loopback covers 127.0.0.0/8 */
		bool dup = false;
		for (size_t j = 0; j < n; j++)
			dup |= out[j] == a;
		if (!dup)
			out[n++] = a;
	}
	freeifaddrs(ifa);
	return (int)n;
}

/* netif_unreachable - RTM_NEWROUTE of type RTN_UNREACHABLE for addr/prefix, main table */
int netif_unreachable(uint32_t addr, unsigned prefix)
{
	struct {
		struct nlmsghdr nh;
		struct rtmsg rt;
		char attrs[64];
	} req;
	memset(&req, 0, sizeof(req));
	req.nh.nlmsg_type = RTM_NEWROUTE;
	req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
	req.nh.nlmsg_seq = 1;
	req.rt.rtm_family = AF_INET;
	req.rt.rtm_dst_len = (unsigned char)(prefix > 32 ? 32 : prefix);
	req.rt.rtm_table = RT_TABLE_MAIN;
	req.rt.rtm_protocol = RTPROT_STATIC;
	req.rt.rtm_scope = RT_SCOPE_UNIVERSE;
	req.rt.rtm_type = RTN_UNREACHABLE;
	struct rtattr *ra = (struct rtattr *)req.attrs;
	ra->rta_type = RTA_DST;
	ra->rta_len = RTA_LENGTH(sizeof(addr));
	memcpy(RTA_DATA(ra), &addr, sizeof(addr));
	req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg)) + RTA_ALIGN(ra->rta_len);

	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return -errno;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	int rc = 0;
	if (sendto(fd, &req, req.nh.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		rc = -errno;
	} else {
		char buf[512];
		ssize_t got = recv(fd, buf, sizeof(buf), 0);
		struct nlmsghdr *nh = (struct nlmsghdr *)buf;
		if (got < 0)
			rc = -errno;
		else if ((size_t)got < sizeof(*nh) || nh->nlmsg_type != NLMSG_ERROR)
			rc = -EPROTO;
		else
			rc = ((struct nlmsgerr *)NLMSG_DATA(nh))->error; /* 0: the ack */
	}
	close(fd);
	return rc;
}
