// cnidriver runs a CNI network configuration list the way a container runtime does,
// through libcni (github.com/containernetworking/cni/libcni), so that the tests hold the
// capvco-sriov plugin to the real runtime library rather than to our own idea of it.
//
//	cnidriver add|check|del   -conflist F -netns P -id C -ifname I [-args K=V;K=V]
//	cnidriver gc              -conflist F [-valid '[{"containerID":"c","ifname":"net1"}]']
//	cnidriver status          -conflist F
//	cnidriver version         -type PLUGIN
//
// Plugins are looked up in -path (colon-separated), results are cached in -cache (as
// libcni does for a runtime). The answer is JSON on stdout: ADD's result as libcni returns
// it, {"ok": true} for the others, and {"error": {"code", "msg", "details"}} with exit
// status 1 when a plugin (or libcni) refused.
//
// libcni 1.1.2 (Debian 12's golang-github-appc-cni-dev) predates CNI 1.1 and has no
// GCNetworkList or GetStatusNetworkList: gc and status do what libcni 1.2 does for them
// (the network list's name and cniVersion, and for GC `cni.dev/valid-attachments`,
// injected into each plugin's configuration, then CNI_COMMAND=GC or STATUS through
// libcni's invoke), and only for a list of cniVersion 1.1.0 or later.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

type attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: cnidriver add|check|del|gc|status|version [flags]"))
	}
	command := os.Args[1]
	flags := flag.NewFlagSet(command, flag.ExitOnError)
	conflist := flags.String("conflist", "", "the network configuration list (a file)")
	netns := flags.String("netns", "", "the network namespace path")
	containerID := flags.String("id", "", "CNI_CONTAINERID")
	ifname := flags.String("ifname", "net1", "CNI_IFNAME")
	cniArgs := flags.String("args", "", "CNI_ARGS: K=V;K=V")
	path := flags.String("path", "/opt/cni/bin", "where the plugins are, colon-separated")
	cache := flags.String("cache", "", "libcni's result cache directory")
	valid := flags.String("valid", "[]", "gc: the valid attachments, JSON")
	pluginType := flags.String("type", "", "version: the plugin to ask")
	timeout := flags.Duration("timeout", 120*time.Second, "how long the whole call may take")
	_ = flags.Parse(os.Args[2:])

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	paths := strings.Split(*path, ":")
	cni := libcni.NewCNIConfigWithCacheDir(paths, *cache, nil)

	if command == "version" {
		info, err := cni.GetVersionInfo(ctx, *pluginType)
		if err != nil {
			fail(err)
		}
		answer(map[string]interface{}{"supportedVersions": info.SupportedVersions()})
		return
	}

	list, err := libcni.ConfListFromFile(*conflist)
	if err != nil {
		fail(err)
	}
	rt := &libcni.RuntimeConf{
		ContainerID: *containerID,
		NetNS:       *netns,
		IfName:      *ifname,
		Args:        parseArgs(*cniArgs),
	}

	switch command {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			fail(err)
		}
		answer(result)
	case "check":
		if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
		answer(map[string]bool{"ok": true})
	case "del":
		if err := cni.DelNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
		answer(map[string]bool{"ok": true})
	case "gc":
		var attachments []attachment
		if err := json.Unmarshal([]byte(*valid), &attachments); err != nil {
			fail(fmt.Errorf("-valid: %w", err))
		}
		inject := map[string]interface{}{"cni.dev/valid-attachments": attachments}
		if err := eachPlugin(ctx, list, paths, "GC", inject); err != nil {
			fail(err)
		}
		answer(map[string]bool{"ok": true})
	case "status":
		if err := eachPlugin(ctx, list, paths, "STATUS", nil); err != nil {
			fail(err)
		}
		answer(map[string]bool{"ok": true})
	default:
		fail(fmt.Errorf("unknown command %q", command))
	}
}

// eachPlugin sends a CNI 1.1 command (GC, STATUS) to every plugin of the list, as libcni
// 1.2's GCNetworkList and GetStatusNetworkList do; nothing for a list older than 1.1.0.
func eachPlugin(ctx context.Context, list *libcni.NetworkConfigList, paths []string, command string, more map[string]interface{}) error {
	if newer, err := version.GreaterThanOrEqualTo(list.CNIVersion, "1.1.0"); err != nil || !newer {
		return err
	}
	inject := map[string]interface{}{"name": list.Name, "cniVersion": list.CNIVersion}
	for key, value := range more {
		inject[key] = value
	}
	for _, plugin := range list.Plugins {
		conf, err := libcni.InjectConf(plugin, inject)
		if err != nil {
			return err
		}
		found, err := invoke.FindInPath(plugin.Network.Type, paths)
		if err != nil {
			return err
		}
		args := &invoke.Args{Command: command, Path: strings.Join(paths, ":")}
		if err := invoke.ExecPluginWithoutResult(ctx, found, conf.Bytes, args, nil); err != nil {
			return fmt.Errorf("plugin type=%q failed (%s): %w", plugin.Network.Type, strings.ToLower(command), err)
		}
	}
	return nil
}

func parseArgs(raw string) [][2]string {
	var out [][2]string
	for _, part := range strings.Split(raw, ";") {
		if key, value, found := strings.Cut(part, "="); found {
			out = append(out, [2]string{key, value})
		}
	}
	return out
}

func answer(value interface{}) {
	encoded, err := json.Marshal(value)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(encoded))
}

// fail says what libcni answered: the plugin's CNI error (code, msg, details) when there
// is one inside, else libcni's own message as code 0.
func fail(err error) {
	out := map[string]interface{}{"code": 0, "msg": err.Error(), "details": ""}
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		out = map[string]interface{}{"code": cniErr.Code, "msg": cniErr.Msg, "details": cniErr.Details}
		out["wrapped"] = err.Error()
	}
	encoded, _ := json.Marshal(map[string]interface{}{"error": out})
	fmt.Println(string(encoded))
	os.Exit(1)
}
