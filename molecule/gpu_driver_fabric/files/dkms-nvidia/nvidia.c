// SPDX-License-Identifier: GPL-2.0
/* STAND-IN for NVIDIA's kernel module (gpufleet.nvidia molecule tests): it does nothing. */
#include <linux/module.h>

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("STAND-IN for tests, not NVIDIA's driver");

static int __init standin_init(void)
{
	return 0;
}

static void __exit standin_exit(void)
{
}

module_init(standin_init);
module_exit(standin_exit);
