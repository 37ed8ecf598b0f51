// The cluster test's stand-in for Hyperlight's Kubernetes device plugin
// (github.com/hyperlight-dev/hyperlight-on-kubernetes), which no registry reachable here ships.
// It does what that plugin does for a pod, through the kubelet's own device-plugin API
// (v1beta1), so that the DaemonSet's request for hyperlight.dev/hypervisor is scheduled and
// allocated by the real device manager:
//
//   - registers the resource with the kubelet and advertises -count devices, all the one
//     hypervisor device (a hypervisor is shared: each allocation is a grant, not a device);
//   - answers each allocation with the device node, read-write, in the container.
//
// What it does differently, because Kubernetes 1.20 predates CDI: the real plugin injects the
// device through a CDI spec that makes the pod's user its owner; here the kubelet passes a
// DeviceSpec to containerd, which gives the node the owner of the container's security
// context when `device_ownership_from_security_context` is set (tests/kube/cluster.sh sets it).
// Nor does it label the node (the real plugin does; the test does with kubectl).
//
// Built by `cargo xtask kubernetes` inside Kubernetes' own source tree, with its vendored
// gRPC and device-plugin API, offline. The kubelet forgets every plugin when it restarts
// (it removes their sockets): the plugin then exits, for its supervisor to start it again.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	api.UnimplementedDevicePluginServer
	device  string
	devices []*api.Device
	stop    chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *api.Empty) (*api.DevicePluginOptions, error) {
	return &api.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once: they never change while the plugin runs.
func (p *plugin) ListAndWatch(_ *api.Empty, stream api.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&api.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-p.stop
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *api.AllocateRequest) (*api.AllocateResponse, error) {
	answer := &api.AllocateResponse{}
	for _, container := range req.ContainerRequests {
		log.Printf("allocating %s to a container (%d grant(s))", p.device, len(container.DevicesIDs))
		answer.ContainerResponses = append(answer.ContainerResponses, &api.ContainerAllocateResponse{
			Devices: []*api.DeviceSpec{{ContainerPath: p.device, HostPath: p.device, Permissions: "rw"}},
		})
	}
	return answer, nil
}

func (p *plugin) PreStartContainer(context.Context, *api.PreStartContainerRequest) (*api.PreStartContainerResponse, error) {
	return &api.PreStartContainerResponse{}, nil
}

func register(resource, endpoint string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", addr)
	}
	conn, err := grpc.DialContext(ctx, api.KubeletSocket, grpc.WithInsecure(), grpc.WithBlock(), grpc.WithContextDialer(dial))
	if err != nil {
		return fmt.Errorf("connecting to the kubelet at %s: %v", api.KubeletSocket, err)
	}
	defer conn.Close()
	_, err = api.NewRegistrationClient(conn).Register(ctx, &api.RegisterRequest{
		Version:      api.Version,
		Endpoint:     endpoint,
		ResourceName: resource,
	})
	return err
}

func main() {
	device := flag.String("device", "/dev/kvm", "the hypervisor device each allocation grants")
	resource := flag.String("resource", "hyperlight.dev/hypervisor", "the extended resource advertised")
	count := flag.Int("count", 64, "how many allocations the node offers at once")
	flag.Parse()
	if _, err := os.Stat(*device); err != nil {
		log.Fatalf("no hypervisor device: %v", err)
	}
	p := &plugin{device: *device, stop: make(chan struct{})}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &api.Device{ID: fmt.Sprintf("%s-%d", filepath.Base(*device), i), Health: api.Healthy})
	}
	endpoint := "hyperlightd-test.sock"
	socket := filepath.Join(api.DevicePluginPath, endpoint)
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		log.Fatalf("removing the old socket: %v", err)
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		log.Fatalf("listening on %s: %v", socket, err)
	}
	server := grpc.NewServer()
	api.RegisterDevicePluginServer(server, p)
	go func() {
		if err := server.Serve(listener); err != nil {
			log.Fatalf("serving: %v", err)
		}
	}()
	if err := register(*resource, endpoint); err != nil {
		log.Fatalf("registering %s: %v", *resource, err)
	}
	log.Printf("registered %s: %d grants of %s", *resource, *count, *device)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case sig := <-signals:
			log.Printf("%v: stopping", sig)
			close(p.stop)
			server.Stop()
			return
		case <-tick.C:
			if _, err := os.Stat(socket); os.IsNotExist(err) {
				log.Fatalf("the kubelet removed %s (it restarted): exiting, to register again", socket)
			}
		}
	}
}
