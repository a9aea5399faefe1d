// Command argocd-health evaluates a health check with Argo CD's own code, in both of the
// ways Argo CD runs one:
//
//	argocd-health builtin HEALTH.lua OBJECT.yaml...
//	argocd-health configmap ARGOCD-CM.yaml OBJECT.yaml...
//
// builtin runs the script as one shipped in resource_customizations/ runs: util/lua with
// the standard libraries open, as Argo CD's TestLuaHealthScript does. configmap reads an
// argocd-cm ConfigMap through Argo CD's settings manager and evaluates whatever it
// configures for the object, libraries off unless it sets useOpenLibs: the code path of
// `argocd admin settings resource-overrides health` and of the application controller.
//
// One JSON line per object: "script" is what the Lua returned (deletionMessage kept, what
// health_test.yaml compares), "health" what Argo CD shows (gitops-engine's deletion
// handling applied), "error" a Lua or decoding error (Argo CD shows Unknown then).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	health "github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	"github.com/argoproj/argo-cd/v3/common"
	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

type result struct {
	Input  string               `json:"input"`
	Script *health.HealthStatus `json:"script"`
	Health *health.HealthStatus `json:"health"`
	Error  string               `json:"error,omitempty"`
}

// builtinScript is a health check evaluated the way Argo CD evaluates its built-in ones.
type builtinScript struct{ source string }

func (b builtinScript) GetResourceHealth(obj *unstructured.Unstructured) (*health.HealthStatus, error) {
	return lua.VM{UseOpenLibs: true}.ExecuteHealthLua(obj, b.source)
}

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: argocd-health builtin HEALTH.lua OBJECT.yaml... | configmap ARGOCD-CM.yaml OBJECT.yaml...")
		os.Exit(2)
	}
	mode, source, objects := os.Args[1], os.Args[2], os.Args[3:]
	var override health.HealthOverride
	var raw func(*unstructured.Unstructured) (*health.HealthStatus, error)
	switch mode {
	case "builtin":
		script, err := os.ReadFile(source)
		check(err)
		builtin := builtinScript{string(script)}
		override, raw = builtin, builtin.GetResourceHealth
	case "configmap":
		overrides := configMapOverrides(source)
		override = lua.ResourceHealthOverrides(overrides)
		raw = func(obj *unstructured.Unstructured) (*health.HealthStatus, error) {
			vm := lua.VM{ResourceOverrides: overrides}
			script, useOpenLibs, err := vm.GetHealthScript(obj)
			if err != nil || script == "" {
				return nil, err
			}
			vm.UseOpenLibs = useOpenLibs
			return vm.ExecuteHealthLua(obj, script)
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q: builtin or configmap\n", mode)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	for _, path := range objects {
		obj := readObject(path)
		res := result{Input: path}
		script, err := raw(obj)
		if err != nil {
			res.Error = err.Error()
		}
		res.Script = script
		// GetResourceHealth turns an error into Unknown with its text, as the controller shows it.
		res.Health, _ = health.GetResourceHealth(obj, override)
		check(out.Encode(res))
	}
}

// configMapOverrides reads resource customizations the way `argocd admin settings
// resource-overrides` does: the ConfigMap and a placeholder argocd-secret in a fake
// clientset, read back through the settings manager.
func configMapOverrides(path string) map[string]appv1.ResourceOverride {
	data, err := os.ReadFile(path)
	check(err)
	var cm corev1.ConfigMap
	check(yaml.Unmarshal(data, &cm))
	secret := corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: common.ArgoCDSecretName},
		Data: map[string][]byte{
			"admin.password":   []byte("test"),
			"server.secretkey": []byte("test"),
		},
	}
	for _, obj := range []metav1.Object{&cm, &secret} {
		obj.SetNamespace("default")
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["app.kubernetes.io/part-of"] = "argocd"
		obj.SetLabels(labels)
	}
	manager := settings.NewSettingsManager(context.Background(), fake.NewClientset(&secret, &cm), "default")
	check(manager.ResyncInformers())
	overrides, err := manager.GetResourceOverrides()
	check(err)
	return overrides
}

func readObject(path string) *unstructured.Unstructured {
	data, err := os.ReadFile(path)
	check(err)
	obj := map[string]any{}
	check(yaml.Unmarshal(data, &obj))
	return &unstructured.Unstructured{Object: obj}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "argocd-health:", err)
		os.Exit(1)
	}
}
