#!/bin/sh
# Outer guest of the bootscope lab (generated): nested KVM under emulation.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs tracefs /sys/kernel/tracing || echo "lab: warning: cannot mount tracefs"
mount -t debugfs debugfs /sys/kernel/debug || echo "lab: warning: cannot mount debugfs"
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
@CONSOLE_MODE@
# Heartbeat on the third serial port: the host counts the lab machine as
# frozen when it stops (LabConfig::freeze_after).
# The host's kicks arrive on the same port (see HeartbeatLine): not echoed.
if [ -c /dev/ttyS2 ]; then
	stty raw -echo </dev/ttyS2 2>/dev/null
	( while :; do printf . || exit; sleep 2; done ) >/dev/ttyS2 2>/dev/null </dev/null &
fi
@LOAD_MODULES@
if [ -c /dev/kvm ]; then
	lab_kvm=1
	echo "lab: nested KVM ready (kvm_amd npt=$(cat /sys/module/kvm_amd/parameters/npt 2>/dev/null))"
	lab_nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
	if [ "$lab_nodes" -gt 1 ]; then
		for n in /sys/devices/system/node/node[0-9]*; do
			lab_shape="$lab_shape ${n##*/}: cpus $(cat $n/cpulist), $(( $(sed -n 's/.*MemTotal: *\([0-9]*\).*/\1/p' $n/meminfo) / 1024 )) MiB;"
		done
		echo "lab: $lab_nodes NUMA nodes:$lab_shape distances $(cat /sys/devices/system/node/node0/distance)"
	fi
else
	lab_kvm=0
	echo "lab: /dev/kvm is missing: kvm_amd did not load in the lab guest (kernel @KERNEL_VERSION@), so nested KVM is unavailable; its kernel messages follow"
	dmesg | grep -i -e kvm -e svm -e ccp | tail -n 20
fi
@ADDRESS_RANDOMIZATION@
mkdir -p @CWD@ && cd @CWD@
@OUTPUT_DIRS@
@RUN_COMMAND@
lab_code=$?
cd /
@LAB_SEND_FUNCTION@
if [ -c /dev/ttyS1 ]; then
	exec 3<>/dev/ttyS1
	stty raw -echo <&3
	{
		echo '@STREAM_HEADER@'
		echo "KVM $lab_kvm"
		@SEND_OUTPUTS@
		echo "EXIT $lab_code"
	} >&3
	# The last close waits until the UART has sent everything.
	exec 3>&-
else
	echo "lab: /dev/ttyS1 is missing, so the results cannot be sent back"
fi
poweroff -f
