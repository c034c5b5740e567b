package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// k8sObjects parses every manifest in kubernetes/ (all documents of every
// file) and returns them by kind.
func k8sObjects(t *testing.T) (map[string][]map[string]any, []string) {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string][]map[string]any{}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
		for _, d := range yamlDocs(t, f) {
			kind, api := str(d["kind"]), str(d["apiVersion"])
			if kind == "" || api == "" {
				t.Errorf("%s: a document without kind or apiVersion", f)
				continue
			}
			if kind != "Kustomization" && str(dig(d, "metadata", "name")) == "" {
				t.Errorf("%s: %s without metadata.name", f, kind)
			}
			byKind[kind] = append(byKind[kind], d)
		}
	}
	return byKind, names
}

func one(t *testing.T, byKind map[string][]map[string]any, kind string) map[string]any {
	t.Helper()
	if len(byKind[kind]) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(byKind[kind]), kind)
	}
	return byKind[kind][0]
}

func TestKubernetes(t *testing.T) {
	byKind, files := k8sObjects(t)
	if len(files) < 6 {
		t.Fatalf("only %d manifest files", len(files))
	}
	if len(byKind["Secret"]) != 0 {
		t.Error("a Secret is committed; reference it, never commit its values")
	}
	for kind, api := range map[string]string{
		"Deployment": "apps/v1", "Service": "v1", "ConfigMap": "v1",
		"PodDisruptionBudget": "policy/v1", "HorizontalPodAutoscaler": "autoscaling/v2",
		"ServiceAccount": "v1", "Kustomization": "kustomize.config.k8s.io/v1beta1",
		"NetworkPolicy": "networking.k8s.io/v1",
	} {
		if o := one(t, byKind, kind); str(o["apiVersion"]) != api {
			t.Errorf("%s apiVersion %s, want %s", kind, str(o["apiVersion"]), api)
		}
	}

	// Every manifest is in the kustomization, and every resource listed
	// exists.
	var resources []string
	for _, r := range list(dig(one(t, byKind, "Kustomization"), "resources")) {
		resources = append(resources, str(r))
		if !exists(filepath.Join("kubernetes", str(r))) {
			t.Errorf("kustomization lists %s, which does not exist", str(r))
		}
	}
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(resources, f) {
			t.Errorf("kubernetes/%s is not in kustomization.yaml", f)
		}
	}

	k := loadK8sManifests(t, byKind)
	t.Run("deployment", func(t *testing.T) {
		k.checkDeployment(t)
		k.checkDeploymentConfig(t)
	})

	t.Run("service", func(t *testing.T) { k.checkService(t) })

	t.Run("tls from a secret the pod's user reads", func(t *testing.T) { k.checkTLSFromSecret(t) })

	t.Run("client addresses", func(t *testing.T) { k.checkClientAddresses(t) })

	t.Run("admin listener", func(t *testing.T) { k.checkAdminListener(t) })

	t.Run("pdb and hpa", func(t *testing.T) { k.checkDisruptionAndScaling(t) })
}

// k8sManifests is the Kubernetes manifests as TestKubernetes's checks read
// them.
type k8sManifests struct {
	byKind    map[string][]map[string]any
	dep       map[string]any // the Deployment
	pod       any            // the Deployment's pod spec
	podLabels map[string]any
	c         any            // the pod's one container
	ports     map[string]int // the container's ports by name
	cm        map[string]any // the ConfigMap
	data      map[string]any // the ConfigMap's data
	cfg       *config.Config // the ConfigMap's exgate.yaml with the pods' environment
	traffic   string         // the traffic port's name: http or https
}

// selects reports whether a label selector matches the pods' labels.
func (k *k8sManifests) selects(sel any) bool {
	m, _ := sel.(map[string]any)
	if len(m) == 0 {
		return false
	}
	for key, v := range m {
		if k.podLabels[key] != v {
			return false
		}
	}
	return true
}

// loadK8sManifests reads the Deployment's pod and its one container, and
// checks the ConfigMap's configuration with the pods' environment.
func loadK8sManifests(t *testing.T, byKind map[string][]map[string]any) *k8sManifests {
	t.Helper()
	dep := one(t, byKind, "Deployment")
	pod := dig(dep, "spec", "template", "spec")
	podLabels, _ := dig(dep, "spec", "template", "metadata", "labels").(map[string]any)
	k := &k8sManifests{byKind: byKind, dep: dep, pod: pod, podLabels: podLabels}
	if !k.selects(dig(dep, "spec", "selector", "matchLabels")) {
		t.Error("the Deployment's selector does not match its pod labels")
	}
	containers := list(dig(pod, "containers"))
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	c := containers[0]
	ports := map[string]int{}
	for _, p := range list(dig(c, "ports")) {
		ports[str(dig(p, "name"))] = dig(p, "containerPort").(int)
	}

	// The configuration the pods run, with the pods' environment.
	env := map[string]string{}
	for _, e := range list(dig(c, "env")) {
		name := str(dig(e, "name"))
		switch {
		case dig(e, "value") != nil:
			env[name] = str(dig(e, "value"))
		case dig(e, "valueFrom", "secretKeyRef") != nil:
			env[name] = "from-secret"
		default:
			t.Errorf("env %s has neither a value nor a secretKeyRef", name)
		}
	}
	cm := one(t, byKind, "ConfigMap")
	data, _ := dig(cm, "data").(map[string]any)
	checked := config.Check("configmap exgate.yaml", []byte(str(data["exgate.yaml"])), envFunc(env))
	if err := checked.Problems(); err != nil {
		t.Fatalf("the ConfigMap's exgate.yaml with the Deployment's environment: %v", err)
	}
	cfg := checked.Config
	// No trust lets a client choose the address it is counted as.
	for _, w := range checked.Warnings() {
		t.Errorf("the ConfigMap's exgate.yaml: %v", w)
	}

	// The traffic port is named for its protocol.
	traffic := "http"
	if len(cfg.Server.TLS.Certificates) > 0 {
		traffic = "https"
	}
	k.c, k.ports, k.cm, k.data, k.cfg, k.traffic = c, ports, cm, data, cfg, traffic
	return k
}

// checkDeployment checks the Deployment's pods: their replicas match
// limiter.replicas, their probes and grace period fit the admin listener and
// the drain, and they run constrained, non-root, with secrets from a Secret.
func (k *k8sManifests) checkDeployment(t *testing.T) {
	dep, pod, c, ports, cfg, traffic := k.dep, k.pod, k.c, k.ports, k.cfg, k.traffic
	if r := dig(dep, "spec", "replicas"); r != 3 {
		t.Errorf("replicas %v, want 3", r)
	}
	if cfg.Limiter.Replicas != 3 {
		t.Errorf("limiter.replicas %d, the Deployment runs 3", cfg.Limiter.Replicas)
	}
	// Admin listener on all interfaces, at the port named admin.
	adminHost, adminPort := hostPort(t, cfg.AdminListen)
	if adminHost != "0.0.0.0" && adminHost != "" {
		t.Errorf("admin listener %s is not reachable by the kubelet", cfg.AdminListen)
	}
	if ports["admin"] != adminPort {
		t.Errorf("container port admin = %d, the admin listener is on %d", ports["admin"], adminPort)
	}
	if _, p := hostPort(t, cfg.Listen); ports[traffic] != p {
		t.Errorf("container port %s = %d, the traffic listener is on %d", traffic, ports[traffic], p)
	}
	for _, pr := range []struct{ probe, path string }{{"readinessProbe", "/readyz"}, {"livenessProbe", "/healthz"}} {
		get := dig(c, pr.probe, "httpGet")
		if str(dig(get, "path")) != pr.path {
			t.Errorf("%s path %q, want %s", pr.probe, str(dig(get, "path")), pr.path)
		}
		port := dig(get, "port")
		if port != "admin" && port != adminPort {
			t.Errorf("%s port %v, want the admin port", pr.probe, port)
		}
	}
	// Readiness must notice draining before the listener closes.
	period, _ := dig(c, "readinessProbe", "periodSeconds").(int)
	failures, _ := dig(c, "readinessProbe", "failureThreshold").(int)
	if period == 0 || failures == 0 {
		t.Error("readinessProbe without periodSeconds and failureThreshold")
	} else if d := time.Duration(period*failures) * time.Second; d >= cfg.Server.DrainDelay {
		t.Errorf("readiness notices draining after up to %s, but the listener closes after drain_delay %s", d, cfg.Server.DrainDelay)
	}
	grace, _ := dig(pod, "terminationGracePeriodSeconds").(int)
	if need := cfg.Server.DrainDelay + cfg.Server.ShutdownTimeout; time.Duration(grace)*time.Second <= need {
		t.Errorf("terminationGracePeriodSeconds %d ≤ drain_delay + shutdown_timeout = %s", grace, need)
	}
	for _, k := range []string{"requests", "limits"} {
		for _, r := range []string{"cpu", "memory"} {
			if str(dig(c, "resources", k, r)) == "" {
				t.Errorf("resources.%s.%s is not set", k, r)
			}
		}
	}
	if dig(pod, "securityContext", "runAsNonRoot") != true {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if uid, _ := dig(pod, "securityContext", "runAsUser").(int); uid == 0 {
		t.Error("pod securityContext.runAsUser is root or unset")
	}
	sc := dig(c, "securityContext")
	if dig(sc, "readOnlyRootFilesystem") != true || dig(sc, "allowPrivilegeEscalation") != false || dig(sc, "runAsNonRoot") != true {
		t.Errorf("container securityContext %v: want read-only root, no privilege escalation, non-root", sc)
	}
	if drop := list(dig(sc, "capabilities", "drop")); !slices.Contains(drop, any("ALL")) {
		t.Errorf("capabilities.drop %v, want ALL", drop)
	}
	// Secrets come from a Secret reference.
	for _, name := range []string{cfg.Limiter.KeySecretEnv, cfg.Limiter.Redis.PasswordEnv} {
		i := slices.IndexFunc(list(dig(c, "env")), func(e any) bool { return str(dig(e, "name")) == name })
		if i < 0 {
			t.Errorf("env %s is not set", name)
			continue
		}
		ref := dig(list(dig(c, "env"))[i], "valueFrom", "secretKeyRef")
		if str(dig(ref, "name")) == "" || str(dig(ref, "key")) == "" {
			t.Errorf("env %s is not a secretKeyRef", name)
		}
	}
	// Scrape annotations point at the admin listener.
	ann := dig(dep, "spec", "template", "metadata", "annotations")
	if str(dig(ann, "prometheus.io/scrape")) != "true" || str(dig(ann, "prometheus.io/port")) != strconv.Itoa(adminPort) || str(dig(ann, "prometheus.io/path")) != "/metrics" {
		t.Errorf("scrape annotations %v, want scrape=true port=%d path=/metrics", ann, adminPort)
	}
}

// checkDeploymentConfig checks that the ConfigMap is mounted, as a whole
// directory, where -config reads it, with the tokens file beside it, and
// that the pods use the ServiceAccount without mounting its token.
func (k *k8sManifests) checkDeploymentConfig(t *testing.T) {
	byKind, pod, c, cfg, cm, data := k.byKind, k.pod, k.c, k.cfg, k.cm, k.data
	// The config is mounted where -config reads it.
	args := list(dig(c, "args"))
	i := slices.IndexFunc(args, func(v any) bool { return str(v) == "-config" })
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("args %v have no -config FILE", args)
	}
	cfgPath := str(args[i+1])
	var mountVol string
	for _, m := range list(dig(c, "volumeMounts")) {
		if path.Dir(cfgPath) == str(dig(m, "mountPath")) {
			mountVol = str(dig(m, "name"))
			// The kubelet never updates a subPath mount: a ConfigMap
			// change would not reach exgate's file watch.
			if dig(m, "subPath") != nil {
				t.Errorf("the configuration is mounted with subPath %v: ConfigMap changes would never arrive", dig(m, "subPath"))
			}
		}
	}
	if cfg.ReloadInterval <= 0 {
		t.Errorf("the ConfigMap turns reload_interval off: a ConfigMap change would need a restart")
	}
	vi := slices.IndexFunc(list(dig(pod, "volumes")), func(v any) bool { return str(dig(v, "name")) == mountVol })
	if mountVol == "" || vi < 0 || str(dig(list(dig(pod, "volumes"))[vi], "configMap", "name")) != str(dig(cm, "metadata", "name")) {
		t.Fatalf("-config %s is not on a volume of ConfigMap %s", cfgPath, str(dig(cm, "metadata", "name")))
	}
	if data[path.Base(cfgPath)] == nil {
		t.Errorf("the ConfigMap has no key %s", path.Base(cfgPath))
	}
	if cfg.TokensFile != "" {
		tf := tokensPath(cfg.TokensFile, cfgPath)
		if path.Dir(tf) != path.Dir(cfgPath) || data[path.Base(tf)] == nil {
			t.Errorf("tokens_file %s (%s) is not in the mounted ConfigMap", cfg.TokensFile, tf)
		} else {
			checkTokensFile(t, "configmap "+path.Base(tf), str(data[path.Base(tf)]), cfg)
		}
	}
	if str(dig(pod, "serviceAccountName")) != str(dig(one(t, byKind, "ServiceAccount"), "metadata", "name")) {
		t.Error("the pods do not use the ServiceAccount")
	}
	if dig(pod, "automountServiceAccountToken") != false {
		t.Error("the pods mount a service account token they do not need")
	}
}

// checkService checks that the Service selects exgate's pods and targets
// their traffic port.
func (k *k8sManifests) checkService(t *testing.T) {
	byKind, ports, traffic, selects := k.byKind, k.ports, k.traffic, k.selects
	svc := one(t, byKind, "Service")
	if !selects(dig(svc, "spec", "selector")) {
		t.Error("the Service selects no exgate pod")
	}
	for _, p := range list(dig(svc, "spec", "ports")) {
		tp := str(dig(p, "targetPort"))
		if tp != traffic && tp != strconv.Itoa(ports[traffic]) {
			t.Errorf("Service port %v targets %s, want the traffic port", dig(p, "name"), tp)
		}
	}
}

// checkTLSFromSecret checks that every certificate file is in a Secret
// volume mounted as a whole directory (a subPath mount would never see a
// renewal), whose files the container's user can read as the kubelet writes
// them.
func (k *k8sManifests) checkTLSFromSecret(t *testing.T) {
	pod, c, cfg := k.pod, k.c, k.cfg
	if len(cfg.Server.TLS.Certificates) == 0 {
		t.Fatal("the ConfigMap serves no TLS")
	}
	// Every certificate file is in a Secret volume mounted as a whole
	// directory (a subPath mount would never see a renewal), whose
	// files the container's user can read as the kubelet writes them.
	for i, cert := range cfg.Server.TLS.Certificates {
		for _, f := range []string{cert.CertFile, cert.KeyFile} {
			vol := secretVolumeOf(t, pod, c, f)
			if vol == nil {
				t.Errorf("certificates[%d]: %s is not in a mounted Secret", i, f)
				continue
			}
			if b := path.Base(f); b != "tls.crt" && b != "tls.key" {
				t.Errorf("certificates[%d]: %s is not a key of a kubernetes.io/tls Secret", i, f)
			}
			if why := unreadable(podUser(pod, c), secretFileMode(vol)); why != "" {
				t.Errorf("certificates[%d]: %s: %s", i, f, why)
			}
		}
	}
}

// checkClientAddresses checks that the balancer keeps each client's address
// as the peer: no PROXY protocol and nobody trusted to name a client, or
// else only the balancer, narrowly.
func (k *k8sManifests) checkClientAddresses(t *testing.T) {
	byKind, cfg := k.byKind, k.cfg
	// The balancer keeps each client's address as the peer: no PROXY
	// protocol and nobody trusted to name a client, or else only the
	// balancer, narrowly (the warnings above).
	svc := one(t, byKind, "Service")
	if str(dig(svc, "spec", "type")) != "LoadBalancer" {
		t.Errorf("Service type %v, want LoadBalancer", dig(svc, "spec", "type"))
	}
	ann, _ := dig(svc, "metadata", "annotations").(map[string]any)
	proxied := str(ann["service.beta.kubernetes.io/aws-load-balancer-proxy-protocol"]) == "*"
	pp := cfg.Server.ProxyProtocol
	switch {
	case proxied && (len(pp.TrustedPeers) == 0 || pp.Policy != config.ProxyRequired):
		t.Errorf("the balancer sends the PROXY protocol, proxy_protocol %+v does not require it from it", pp)
	case !proxied && len(pp.TrustedPeers) > 0:
		t.Errorf("proxy_protocol.trusted_peers %v, but the balancer sends no PROXY protocol", pp.TrustedPeers)
	case !proxied && str(dig(svc, "spec", "externalTrafficPolicy")) != "Local":
		t.Error("without the PROXY protocol and externalTrafficPolicy Local, every client has a node's address")
	}
	if len(cfg.ClientIP.TrustedProxies) != 0 {
		t.Errorf("client_ip.trusted_proxies %v: behind an L4 balancer no X-Forwarded-For should be believed", cfg.ClientIP.TrustedProxies)
	}
}

// checkAdminListener checks that the admin listener, when on the pod's
// address, answers a required admin token from a Secret, and that only
// Prometheus may reach its port.
func (k *k8sManifests) checkAdminListener(t *testing.T) {
	byKind, c, ports, cfg, traffic, selects := k.byKind, k.c, k.ports, k.cfg, k.traffic, k.selects
	// On the pod's address for the probes and Prometheus: its console
	// answers the admin token only, from a Secret and not optional
	// (without one it would answer no one).
	if h, _ := hostPort(t, cfg.AdminListen); h == "127.0.0.1" || h == "::1" || h == "localhost" {
		return
	}
	i := slices.IndexFunc(list(dig(c, "env")), func(e any) bool { return str(dig(e, "name")) == cfg.Admin.TokenEnv })
	if i < 0 {
		t.Fatalf("the admin listener is on the pod's address and %s (admin.token_env) is not set", cfg.Admin.TokenEnv)
	}
	ref := dig(list(dig(c, "env"))[i], "valueFrom", "secretKeyRef")
	if str(dig(ref, "name")) == "" || str(dig(ref, "key")) == "" || dig(ref, "optional") == true {
		t.Errorf("%s is %v: want a required secretKeyRef", cfg.Admin.TokenEnv, dig(list(dig(c, "env"))[i], "valueFrom"))
	}
	// Only Prometheus may reach the admin port (the kubelet's probes
	// come from the node, which NetworkPolicy always lets in); the
	// traffic port is open.
	np := one(t, byKind, "NetworkPolicy")
	if !selects(dig(np, "spec", "podSelector", "matchLabels")) {
		t.Fatal("the NetworkPolicy selects no exgate pod")
	}
	open := map[any]bool{}
	for _, rule := range list(dig(np, "spec", "ingress")) {
		for _, p := range list(dig(rule, "ports")) {
			port := dig(p, "port")
			if port != traffic && port != "admin" && port != ports[traffic] && port != ports["admin"] {
				t.Errorf("the NetworkPolicy opens port %v", port)
			}
			from := list(dig(rule, "from"))
			if port == "admin" || port == ports["admin"] {
				if len(from) == 0 || slices.ContainsFunc(from, func(f any) bool { return dig(f, "podSelector", "matchLabels") == nil }) {
					t.Errorf("the NetworkPolicy lets %v reach the admin port: want Prometheus's pods only", from)
				}
			}
			open[port] = len(from) == 0
		}
	}
	if !open[traffic] && !open[ports[traffic]] {
		t.Error("the NetworkPolicy does not open the traffic port to everyone")
	}
}

// checkDisruptionAndScaling checks that the PodDisruptionBudget and the
// HorizontalPodAutoscaler apply to the Deployment.
func (k *k8sManifests) checkDisruptionAndScaling(t *testing.T) {
	byKind, dep, selects := k.byKind, k.dep, k.selects
	pdb := one(t, byKind, "PodDisruptionBudget")
	if !selects(dig(pdb, "spec", "selector", "matchLabels")) {
		t.Error("the PodDisruptionBudget selects no exgate pod")
	}
	if dig(pdb, "spec", "maxUnavailable") == nil && dig(pdb, "spec", "minAvailable") == nil {
		t.Error("the PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
	hpa := one(t, byKind, "HorizontalPodAutoscaler")
	ref := dig(hpa, "spec", "scaleTargetRef")
	if str(dig(ref, "kind")) != "Deployment" || str(dig(ref, "name")) != str(dig(dep, "metadata", "name")) {
		t.Errorf("the HPA scales %v, not the Deployment", ref)
	}
	minR, _ := dig(hpa, "spec", "minReplicas").(int)
	maxR, _ := dig(hpa, "spec", "maxReplicas").(int)
	if minR < 2 || minR > dig(dep, "spec", "replicas").(int) || maxR < minR {
		t.Errorf("HPA min %d max %d: want 2 ≤ min ≤ the Deployment's replicas ≤ max", minR, maxR)
	}
	if len(list(dig(hpa, "spec", "metrics"))) == 0 {
		t.Error("the HPA has no metrics")
	}
}

// TestKustomizeBuild renders the manifests with kubectl's built-in
// kustomize when kubectl is installed (it is optional: the parsing tests
// above always run).
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed; the manifests are checked by parsing only")
	}
	cmd := exec.Command(kubectl, "kustomize", "kubernetes")
	cmd.Env = append(os.Environ(), "KUBECONFIG=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	for _, kind := range []string{"Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "HorizontalPodAutoscaler"} {
		if !strings.Contains(string(out), "\nkind: "+kind+"\n") {
			t.Errorf("kustomize output lacks a %s", kind)
		}
	}
}

// secretVolumeOf returns the Secret volume of pod mounted (whole, not by
// subPath) on the directory of file in container c, or nil.
func secretVolumeOf(t *testing.T, pod, c any, file string) any {
	t.Helper()
	for _, m := range list(dig(c, "volumeMounts")) {
		if path.Dir(file) != str(dig(m, "mountPath")) {
			continue
		}
		if dig(m, "subPath") != nil {
			t.Errorf("%s is mounted with subPath; renewals would not reach the pod", file)
		}
		vi := slices.IndexFunc(list(dig(pod, "volumes")), func(v any) bool { return str(dig(v, "name")) == str(dig(m, "name")) })
		if vi >= 0 && str(dig(list(dig(pod, "volumes"))[vi], "secret", "secretName")) != "" {
			return list(dig(pod, "volumes"))[vi]
		}
	}
	return nil
}

// secretFileMode is the mode the kubelet gives the files of a Secret
// volume: its defaultMode, 0644 when unset.
func secretFileMode(vol any) os.FileMode {
	if m, ok := dig(vol, "secret", "defaultMode").(int); ok {
		return os.FileMode(m)
	}
	return 0o644
}

// podProcess is who a container's process runs as, and the group the
// kubelet gives its volumes' files (fsGroup; 0 without one: root's).
type podProcess struct {
	uid, gid, fsGroup int
	groups            []int // supplementary: fsGroup and supplementalGroups
}

// podUser reads the container's user, group and groups from its own
// securityContext, else the pod's.
func podUser(pod, c any) podProcess {
	get := func(key string) int {
		if v, ok := dig(c, "securityContext", key).(int); ok {
			return v
		}
		v, _ := dig(pod, "securityContext", key).(int)
		return v
	}
	p := podProcess{uid: get("runAsUser"), gid: get("runAsGroup")}
	if fs, ok := dig(pod, "securityContext", "fsGroup").(int); ok {
		p.fsGroup = fs
		p.groups = append(p.groups, fs)
	}
	for _, g := range list(dig(pod, "securityContext", "supplementalGroups")) {
		if n, ok := g.(int); ok {
			p.groups = append(p.groups, n)
		}
	}
	return p
}

// unreadable says why p cannot read a volume file of the given mode,
// owned by root and by group p.fsGroup (root's without one), as the
// kubelet writes it; "" when it can.
func unreadable(p podProcess, mode os.FileMode) string {
	switch {
	case p.uid == 0 && p.gid == 0 && len(p.groups) == 0:
		return ""
	case mode&0o004 != 0:
		return ""
	case mode&0o040 != 0 && (p.gid == p.fsGroup || slices.Contains(p.groups, p.fsGroup)):
		return ""
	}
	return fmt.Sprintf("mode %04o, owner root, group %d: user %d (group %d, groups %v) cannot read it; set the pod's securityContext.fsGroup to a group of the user", mode, p.fsGroup, p.uid, p.gid, p.groups)
}
