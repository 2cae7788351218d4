// Command k8s-validate checks Kubernetes manifests offline and strictly: every document is
// decoded into the Kubernetes API's own Go types (k8s.io/api) by apimachinery's strict
// serializer, so an unknown field, a duplicate field, a wrong type or an unknown kind is an
// error. No cluster and no downloaded schema is needed.
//
// Usage:
//
//	k8s-validate FILE...            each file a YAML stream ("-" reads stdin)
//	k8s-validate -kustomize DIR...  each directory rendered by kustomize (krusty), then checked
//
// It prints one line per document checked and exits 1 naming the file, the document and the
// field at the first problem of each file.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The API groups a workload's manifests use; a kind outside them is reported as unknown.
var groups = []func(*runtime.Scheme) error{
	corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme,
	rbacv1.AddToScheme, networkingv1.AddToScheme, autoscalingv2.AddToScheme,
}

func main() {
	kustomize := flag.Bool("kustomize", false, "arguments are kustomize directories to render and check")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: k8s-validate [-kustomize] FILE|DIR...")
		os.Exit(2)
	}
	scheme := runtime.NewScheme()
	for _, add := range groups {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
	failed := false
	for _, arg := range flag.Args() {
		text, err := read(arg, *kustomize)
		if err == nil {
			err = check(strict, text, arg)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", arg, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// read returns a file's text, stdin's for "-", or a kustomize directory's rendered output.
func read(arg string, kustomize bool) ([]byte, error) {
	switch {
	case kustomize:
		k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
		resources, err := k.Run(filesys.MakeFsOnDisk(), arg)
		if err != nil {
			return nil, fmt.Errorf("kustomize build: %w", err)
		}
		return resources.AsYaml()
	case arg == "-":
		return io.ReadAll(os.Stdin)
	default:
		return os.ReadFile(arg)
	}
}

// check decodes every document of a YAML stream strictly; an empty stream is an error, since a
// manifest file with nothing in it is a mistake.
func check(strict runtime.Decoder, text []byte, origin string) error {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(text)))
	count := 0
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		name, err := decode(strict, doc)
		if err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
		fmt.Printf("%s: document %d: %s ok\n", origin, n, name)
		count++
	}
	if count == 0 {
		return errors.New("no Kubernetes object in it")
	}
	return nil
}

// decode decodes one document strictly (a v1 List's items each in turn) and names it.
func decode(strict runtime.Decoder, doc []byte) (string, error) {
	obj, gvk, err := strict.Decode(doc, nil, nil)
	// A strict error comes with a decoded object: unknown and duplicate fields are still errors.
	if err != nil {
		return "", err
	}
	if list, ok := obj.(*corev1.List); ok {
		for i, item := range list.Items {
			if _, err := decode(strict, item.Raw); err != nil {
				return "", fmt.Errorf("items[%d]: %w", i, err)
			}
		}
		return fmt.Sprintf("List of %d", len(list.Items)), nil
	}
	name := ""
	if meta, ok := obj.(interface{ GetName() string }); ok {
		name = "/" + meta.GetName()
	}
	return gvk.Kind + name, nil
}

// stripComments drops comment-only lines, so a document of comments counts as empty.
func stripComments(doc []byte) []byte {
	var out []string
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out = append(out, line)
		}
	}
	return []byte(strings.Join(out, "\n"))
}
